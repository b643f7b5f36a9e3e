package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/registration"
)

// runMainEnv makes the test binary run main() instead of the tests, so that
// a test sees the real flag set and --help of fleet-controller.
const runMainEnv = "FLEET_CONTROLLER_TEST_RUN_MAIN"

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
	for _, m := range regexp.MustCompile(`(?:envOr|os\.Getenv)\("([A-Z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		names = append(names, m[1])
	}
	return names
}

// helpOf runs `fleet-controller --help` with only env set of the variables
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
		t.Fatalf("fleet-controller --help: %v\n%s", err, out)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if m := regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)\b`).FindStringSubmatch(l); m != nil {
			lines[m[1]] = l
		}
	}
	return lines
}

// TestHelpNamesEveryEnvVar: every environment variable fleet-controller
// reads is named in the help of the flag it sets, and setting it really
// changes that flag's default (so the help tells an operator who sets the
// variable in the Deployment what it does).
func TestHelpNamesEveryEnvVar(t *testing.T) {
	cases := map[string]struct{ flag, value, shown string }{
		"NAMESPACE":                             {flag: "namespace", value: "env-ns", shown: `(default "env-ns")`},
		"API_SERVER_URL":                        {flag: "api-server-url", value: "https://env.example:6443", shown: `(default "https://env.example:6443")`},
		"FLEET_METRICS_BIND_ADDRESS":            {flag: "metrics-bind-address", value: ":9999", shown: `(default ":9999")`},
		"AGENT_IMAGE":                           {flag: "agent-image", value: "registry.example/agent:1", shown: `(default "registry.example/agent:1")`},
		"FLEET_REGISTRATION_TOKEN_TTL_REQUIRED": {flag: "registration-token-ttl-required", value: "true", shown: "(default true)"},
		"KUBECONFIG":                            {flag: "kubeconfig", value: "/env/kubeconfig", shown: `(default "/env/kubeconfig")`},
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

// TestHelpTellsEmptyDefaults: flags whose empty value means something
// other than nothing say what: the agent image the manager then installs,
// and where the manager's own kubeconfig then comes from.
func TestHelpTellsEmptyDefaults(t *testing.T) {
	lines := helpOf(t, envRead(t))
	if l := lines["agent-image"]; !strings.Contains(l, registration.DefaultAgentImage) {
		t.Errorf("--agent-image help lacks the image used when it is empty (%s): %q", registration.DefaultAgentImage, l)
	}
	if l := lines["kubeconfig"]; !strings.Contains(l, "in-cluster") || !strings.Contains(l, "~/.kube/config") {
		t.Errorf("--kubeconfig help does not say what an empty value loads: %q", l)
	}
}
