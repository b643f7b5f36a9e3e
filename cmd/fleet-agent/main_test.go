package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// runMainEnv makes the test binary run main() instead of the tests, so that
// a test sees the real flag set and --help of fleet-agent.
const runMainEnv = "FLEET_AGENT_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// envRead lists the environment variables main.go reads, from its source,
// so that a new one without a case below fails the test.
func envRead(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?:envOr|envDuration|envInt|os\.Getenv)\("([A-Z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		names = append(names, m[1])
	}
	return names
}

// helpOf runs `fleet-agent --help` with only env set of the variables
// main.go reads, and returns the help line of each flag.
func helpOf(t *testing.T, read []string, env ...string) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "--help")
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(read, name) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append([]string{runMainEnv + "=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fleet-agent --help: %v\n%s", err, out)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if m := regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)\b`).FindStringSubmatch(l); m != nil {
			lines[m[1]] = l
		}
	}
	return lines
}

// TestHelpNamesEveryEnvVar: every environment variable fleet-agent reads
// (the fleet-agent chart configures the agent through them) is named in
// the help of the flag it sets, and setting it really changes that flag's
// default.
func TestHelpNamesEveryEnvVar(t *testing.T) {
	cases := map[string]struct{ flag, value, shown string }{
		"NAMESPACE":                           {flag: "namespace", value: "env-ns", shown: `(default "env-ns")`},
		"CHECKIN_INTERVAL":                    {flag: "checkin-interval", value: "7m", shown: "(default 7m0s)"},
		"BUNDLEDEPLOYMENT_RECONCILER_WORKERS": {flag: "workers", value: "7", shown: "(default 7)"},
		"FLEET_AGENT_METRICS_BIND_ADDRESS":    {flag: "metrics-bind-address", value: ":9191", shown: `(default ":9191")`},
		"CATTLE_ELECTION_LEASE_DURATION":      {flag: "leader-election-lease-duration", value: "41s", shown: "(default 41s)"},
		"CATTLE_ELECTION_RENEW_DEADLINE":      {flag: "leader-election-renew-deadline", value: "31s", shown: "(default 31s)"},
		"CATTLE_ELECTION_RETRY_PERIOD":        {flag: "leader-election-retry-period", value: "11s", shown: "(default 11s)"},
		"FLEET_AGENT_PPROF_BIND_ADDRESS":      {flag: "pprof-bind-address", value: "127.0.0.1:6061", shown: `(default "127.0.0.1:6061")`},
	}
	read := envRead(t)
	if len(read) == 0 {
		t.Fatal("found no environment variable in main.go; the pattern is stale")
	}
	plain := helpOf(t, read)
	for _, name := range read {
		tc, ok := cases[name]
		if !ok {
			t.Errorf("main.go reads %s, which this test does not cover", name)
			continue
		}
		if line := plain[tc.flag]; !strings.Contains(line, "env "+name) {
			t.Errorf("--%s help does not name %s: %q", tc.flag, name, line)
		}
		if line := helpOf(t, read, name+"="+tc.value)[tc.flag]; !strings.Contains(line, tc.shown) {
			t.Errorf("%s=%s: --%s help %q, want %s", name, tc.value, tc.flag, line, tc.shown)
		}
	}
}

// TestKubeconfigHelpNamesKUBECONFIG: without --kubeconfig the agent loads
// its cluster as controller-runtime does, where $KUBECONFIG wins over the
// in-cluster config; the help must not claim the in-cluster config is the
// default whatever the environment says.
func TestKubeconfigHelpNamesKUBECONFIG(t *testing.T) {
	l := helpOf(t, envRead(t))["kubeconfig"]
	for _, want := range []string{"$KUBECONFIG", "in-cluster", "~/.kube/config"} {
		if !strings.Contains(l, want) {
			t.Errorf("--kubeconfig help lacks %q: %q", want, l)
		}
	}
}
