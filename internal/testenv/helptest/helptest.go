// Package helptest checks a binary's --help against the environment
// variables its main.go reads, for the tests of the cmd/ mains: an operator
// configures the controller and the agent through those variables (the
// charts set them), so the help of the flag each one sets must name it.
package helptest

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// RunMainEnv is set to "1" in the environment of the test binary re-run by
// Help: the package's TestMain then runs main() instead of the tests, so
// that Help sees the real flag set.
const RunMainEnv = "FLEET_HELPTEST_RUN_MAIN"

// Run is what a cmd package's TestMain calls: main() when re-run by Help,
// else the tests.
func Run(m *testing.M, main func()) {
	if os.Getenv(RunMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// envCall matches the calls by which the mains read their environment.
var envCall = regexp.MustCompile(`(?:envOr|envDuration|envInt|os\.Getenv)\("([A-Z_]+)"`)

// EnvRead lists the environment variables main.go (of the test's working
// directory) reads, from its source, so that a new one a test does not
// cover fails it.
func EnvRead(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range envCall.FindAllStringSubmatch(string(src), -1) {
		names = append(names, m[1])
	}
	if len(names) == 0 {
		t.Fatal("found no environment variable in main.go; the pattern is stale")
	}
	return names
}

var flagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)\b`)

// Help runs the test binary's main with --help, with none of the
// variables in read set but those of env ("NAME=value"), and returns the
// help line of each flag by flag name.
func Help(t *testing.T, read []string, env ...string) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "--help")
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(read, name) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append([]string{RunMainEnv + "=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			lines[m[1]] = l
		}
	}
	return lines
}

// EnvCase is how one environment variable shows in the help: the flag it
// sets, a value to set it to, and what the flag's help then shows as its
// default.
type EnvCase struct{ Flag, Value, Shown string }

// CheckEnvNamed fails t for every variable main.go reads that cases does
// not cover, whose flag's help does not name it, or whose value does not
// become the flag's default shown.
func CheckEnvNamed(t *testing.T, cases map[string]EnvCase) {
	t.Helper()
	read := EnvRead(t)
	plain := Help(t, read)
	for _, name := range read {
		tc, ok := cases[name]
		if !ok {
			t.Errorf("main.go reads %s, which this test does not cover", name)
			continue
		}
		if line := plain[tc.Flag]; !strings.Contains(line, "env "+name) {
			t.Errorf("--%s help does not name %s: %q", tc.Flag, name, line)
		}
		if line := Help(t, read, name+"="+tc.Value)[tc.Flag]; !strings.Contains(line, tc.Shown) {
			t.Errorf("%s=%s: --%s help %q, want %s", name, tc.Value, tc.Flag, line, tc.Shown)
		}
	}
}
