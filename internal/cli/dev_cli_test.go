package cli

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDevUpResumeHintNamesStateDir: when `fleet dev up` fails (here on a
// port that is not free) it says how to resume the kept state. For a
// --state-dir other than the default that command must name the folder
// again: a plain `bin/fleet dev up` or `make quickstart` resumes (or
// creates) the default .fleet-dev instead.
func TestDevUpResumeHintNamesStateDir(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The taken port is the upstream API server's, the first of the range.
	base := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	repo := t.TempDir()

	other := filepath.Join(repo, "other")
	_, _, err = runFleet(t, repo, "", "dev", "up", "--no-build", "--exit-when-ready", "--repo", repo, "--base-port", base, "--state-dir", other)
	if err == nil || !strings.Contains(err.Error(), "is not free") {
		t.Fatalf("dev up on a taken port: %v", err)
	}
	for _, want := range []string{
		"The state is kept in " + other,
		"`bin/fleet dev up --state-dir " + other + "` resumes it",
		"`bin/fleet dev down --state-dir " + other + "` removes it",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "make quickstart") {
		t.Errorf("error offers `make quickstart`, which resumes the default folder:\n%v", err)
	}

	// The default folder: the short commands resume it.
	_, _, err = runFleet(t, repo, "", "dev", "up", "--no-build", "--exit-when-ready", "--repo", repo, "--base-port", base)
	want := "The state is kept in " + filepath.Join(repo, ".fleet-dev") + ": `bin/fleet dev up` (or `make quickstart`) resumes it, `bin/fleet dev down` removes it"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("dev up of the default folder: error lacks %q:\n%v", want, err)
	}
}
