package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/testenv/helptest"
)

func TestMain(m *testing.M) { helptest.Run(m, main) }

// TestUnknownSubcommandExitsNonZero: the binary, run as a user runs it,
// exits 1 with the error on stderr and nothing on stdout for an unknown
// subcommand of a group command (it printed the help and exited 0), and
// still exits 0 with the help for the group command alone.
func TestUnknownSubcommandExitsNonZero(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: []string{"install", "contoller"}, want: `Error: unknown command "contoller" for "fleet install"`},
		{args: []string{"dev", "nope"}, want: `Error: unknown command "nope" for "fleet dev"`},
		{args: []string{"nope"}, want: `Error: unknown command "nope" for "fleet"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := runMain(t, tc.args...)
			if code != 1 || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stderr %q, stdout %.200q: want 1, %q and no output", code, stderr, stdout, tc.want)
			}
		})
	}
	stdout, _, code := runMain(t, "install")
	if code != 0 || !strings.Contains(stdout, "Available Commands:") {
		t.Errorf("fleet install: exit %d, want 0 and its help:\n%s", code, stdout)
	}
}

// runMain runs main() in a child process (the test binary re-run, see
// helptest.Run) with args, and returns its stdout, stderr and exit code.
func runMain(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), helptest.RunMainEnv+"=1")
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatal(err)
	return "", "", -1
}
