package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/testenv/helptest"
)

// runAgentWithEnv runs the agent's main (the test binary re-run, as
// helptest does) with env and a kubeconfig that does not exist, so that it
// stops right after logging its start-up warnings; it returns the output.
func runAgentWithEnv(t *testing.T, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !strings.Contains(name, "INTERVAL") && !strings.HasPrefix(name, "CATTLE_ELECTION_") && name != "BUNDLEDEPLOYMENT_RECONCILER_WORKERS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append([]string{helptest.RunMainEnv + "=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("agent started with a missing kubeconfig:\n%s", out)
	}
	return string(out)
}

// TestAgentLogsIgnoredEnv: an environment variable the agent cannot use
// (a typo in a chart value, a hand-edited Deployment) is logged with its
// name, its value and the default the agent runs with instead, rather
// than silently replaced by the default. Unset, empty and zero durations
// (Rancher's "0 is the default") and good values log nothing.
func TestAgentLogsIgnoredEnv(t *testing.T) {
	out := runAgentWithEnv(t,
		"CHECKIN_INTERVAL=fifteen minutes",
		"CATTLE_ELECTION_LEASE_DURATION=-30s",
		"BUNDLEDEPLOYMENT_RECONCILER_WORKERS=many",
		"CATTLE_ELECTION_RENEW_DEADLINE=0",
		"CATTLE_ELECTION_RETRY_PERIOD=1.5s",
	)
	for _, want := range []string{
		`"variable":"CHECKIN_INTERVAL","value":"fifteen minutes"`, `"default":"15m0s"`,
		`"variable":"CATTLE_ELECTION_LEASE_DURATION","value":"-30s"`, `"default":"30s"`,
		`"variable":"BUNDLEDEPLOYMENT_RECONCILER_WORKERS","value":"many"`, `"default":"50"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	for _, quiet := range []string{"CATTLE_ELECTION_RENEW_DEADLINE", "CATTLE_ELECTION_RETRY_PERIOD"} {
		if strings.Contains(out, quiet) {
			t.Errorf("%s (zero or valid) was logged:\n%s", quiet, out)
		}
	}
	if out := runAgentWithEnv(t, "CHECKIN_INTERVAL=1.5h", "BUNDLEDEPLOYMENT_RECONCILER_WORKERS=7"); strings.Contains(out, "ignoring environment variable") {
		t.Errorf("valid values were reported as ignored:\n%s", out)
	}
}
