package cli

import (
	"strings"
	"testing"
)

// TestGroupCommandsRefuseUnknownSubcommands: `fleet install` and `fleet
// dev` only group subcommands; a misspelt one is an error (as on the root),
// not the help with success, which let a script carry on as if it had
// worked. Without a subcommand they still print their help.
func TestGroupCommandsRefuseUnknownSubcommands(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{args: []string{"install", "contoller"}, want: []string{`unknown command "contoller" for "fleet install"`, "Did you mean this?\n\tcontroller"}},
		{args: []string{"install", "nothing-like-it"}, want: []string{`unknown command "nothing-like-it" for "fleet install"`}},
		{args: []string{"dev", "upp"}, want: []string{`unknown command "upp" for "fleet dev"`, "\tup"}},
		{args: []string{"-n", "x", "install", "agent-tokn", "--values"}, want: []string{`unknown command "agent-tokn" for "fleet install"`, "\tagent-token"}},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, _, err := runFleet(t, t.TempDir(), "", tc.args...)
			if err == nil {
				t.Fatalf("succeeded, printing:\n%s", out)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if out != "" {
				t.Errorf("printed to stdout:\n%s", out)
			}
		})
	}
	for _, group := range []string{"install", "dev"} {
		out, _, err := runFleet(t, t.TempDir(), "", group)
		if err != nil || !strings.Contains(out, "Available Commands:") {
			t.Errorf("fleet %s: err %v, want its help:\n%s", group, err, out)
		}
	}
}

// TestInstallRefusesBadSystemNamespace: --system-namespace must be a
// namespace name; a bad one fails before anything is printed, for the
// manifests would only fail when applied.
func TestInstallRefusesBadSystemNamespace(t *testing.T) {
	for _, args := range [][]string{
		{"install", "controller", "--system-namespace", "Bad_NS"},
		{"install", "controller", "--crds-only", "--system-namespace", "-x"},
		{"install", "agent-config", "--system-namespace", "Bad_NS"},
		{"install", "agent-config", "-l", "env=prod", "--system-namespace", ""},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, _, err := runFleet(t, t.TempDir(), "", args...)
			if err == nil || !strings.Contains(err.Error(), "--system-namespace") || !strings.Contains(err.Error(), "RFC 1123") {
				t.Fatalf("err = %v, want the namespace refused", err)
			}
			if out != "" {
				t.Errorf("printed %d bytes of manifests despite the error", len(out))
			}
		})
	}
	out, _, err := runFleet(t, t.TempDir(), "", "install", "agent-config", "--system-namespace", "my-fleet-system")
	if err != nil || !strings.Contains(out, "namespace: my-fleet-system") {
		t.Errorf("a valid namespace: err %v, output:\n%s", err, out)
	}
}

// TestAgentTokenShortHelp: the one-line help of agent-token, listed by
// `fleet install --help`, must not claim that clusters always join a
// specific cluster group: only -g, which is optional, adds them to one.
func TestAgentTokenShortHelp(t *testing.T) {
	help, _, err := runFleet(t, t.TempDir(), "", "install", "--help")
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	for _, l := range strings.Split(help, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "agent-token ") {
			line = l
		}
	}
	if line == "" || strings.Contains(line, "specific cluster group") || !strings.Contains(line, "with -g") {
		t.Errorf("agent-token's short help %q should say a ClusterGroup is joined only with -g:\n%s", line, help)
	}
}
