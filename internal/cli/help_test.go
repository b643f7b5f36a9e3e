package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// flagLine returns the --help line of flag (e.g. "--file"), so that an
// assertion is about that flag and not the long description or another
// flag's line.
func flagLine(t *testing.T, help, flag string) string {
	t.Helper()
	for _, l := range strings.Split(help, "\n") {
		// Flag lines are indented; the long description is not.
		if strings.HasPrefix(l, "  ") && strings.HasPrefix(strings.TrimSpace(l), "-") && strings.Contains(l, flag+" ") {
			return l
		}
	}
	t.Fatalf("--help has no %s line:\n%s", flag, help)
	return ""
}

// TestApplyFileHelpMatchesRefusal: -f takes the fleet.yaml of one PATH
// only; the help says so (it used to say "the first PATH", which suggested
// further PATHs were read with their own fleet.yaml) and the command
// refuses a second PATH instead of ignoring the flag for it.
func TestApplyFileHelpMatchesRefusal(t *testing.T) {
	help, _, err := runFleet(t, t.TempDir(), "", "apply", "--help")
	if err != nil {
		t.Fatal(err)
	}
	line := flagLine(t, help, "--file")
	if !strings.Contains(line, "single PATH") || strings.Contains(line, "first PATH") {
		t.Errorf("-f help does not say it takes a single PATH: %q", line)
	}

	dir := t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + d + "}\n"
		if err := os.WriteFile(filepath.Join(dir, d, "cm.yaml"), []byte(cm), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := runFleet(t, dir, "namespace: x\n", "apply", "-o", "-", "-f", "-", "r", "a", "b"); err == nil ||
		!strings.Contains(err.Error(), "-f applies to a single PATH, got 2") {
		t.Errorf("-f with two PATHs: err = %v, want the single-PATH refusal", err)
	}
	out, _, err := runFleet(t, dir, "namespace: x\n", "apply", "-o", "-", "-f", "-", "r", "a")
	if err != nil || !strings.Contains(out, "namespace: x") {
		t.Errorf("-f with one PATH: err = %v, want its namespace from stdin in:\n%s", err, out)
	}
}

// TestAgentTokenGroupHelpShowsNoDefault: without -g no ClusterGroup is read
// and no labels are added, so the help must not show a default group (it
// showed "default", suggesting ClusterGroup default was used without -g).
func TestAgentTokenGroupHelpShowsNoDefault(t *testing.T) {
	help, _, err := runFleet(t, t.TempDir(), "", "install", "agent-token", "--help")
	if err != nil {
		t.Fatal(err)
	}
	line := flagLine(t, help, "--group")
	if strings.Contains(line, "(default") || !strings.Contains(line, "without it no labels are added") {
		t.Errorf("-g help should show no default and say what happens without it: %q", line)
	}
}

// TestStatusHelpExplainsDash: a "-" cell means the cluster has no
// deployment of the bundle, which includes a targeted cluster whose
// deployment is not created yet, not only an untargeted one.
func TestStatusHelpExplainsDash(t *testing.T) {
	help, _, err := runFleet(t, t.TempDir(), "", "status", "--help")
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(help), " ")
	for _, want := range []string{`"-" when the cluster has no deployment of the bundle`, "not created yet", "maxNew"} {
		if !strings.Contains(flat, want) {
			t.Errorf("status --help lacks %q:\n%s", want, help)
		}
	}
}

// TestDevUpHelpNamesAssets: up uses KUBEBUILDER_ASSETS for kube-apiserver
// and etcd when it is set (and stops when they are not there), so its
// help must say so, not only docs/quickstart.md.
func TestDevUpHelpNamesAssets(t *testing.T) {
	help, _, err := runFleet(t, t.TempDir(), "", "dev", "up", "--help")
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(help), " ")
	for _, want := range []string{"KUBEBUILDER_ASSETS", "bin/controlplane"} {
		if !strings.Contains(flat, want) {
			t.Errorf("dev up --help lacks %q:\n%s", want, help)
		}
	}
}

// TestDevHelp: up builds bin/fleet too; down says it also stops processes
// an earlier `up` left behind; --timeout says where it counts from; and
// the global flags dev does not use (it makes its own clusters) are neither
// offered nor silently ignored.
func TestDevHelp(t *testing.T) {
	up, _, err := runFleet(t, t.TempDir(), "", "dev", "up", "--help")
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(up), " ")
	for _, want := range []string{"builds bin/fleet, bin/fleet-controller and bin/fleet-agent", "--exit-when-ready it stops everything"} {
		if !strings.Contains(flat, want) {
			t.Errorf("dev up --help lacks %q:\n%s", want, up)
		}
	}
	if line := flagLine(t, up, "--timeout"); !strings.Contains(line, "after the wait for it starts") {
		t.Errorf("--timeout help does not say where it counts from: %q", line)
	}
	down, _, err := runFleet(t, t.TempDir(), "", "dev", "down", "--help")
	if err != nil {
		t.Fatal(err)
	}
	flat = strings.Join(strings.Fields(down), " ")
	for _, want := range []string{"stops a running `fleet dev up`", "left behind when it was killed", "removes the state folder"} {
		if !strings.Contains(flat, want) {
			t.Errorf("dev down --help lacks %q:\n%s", want, down)
		}
	}
	for name, help := range map[string]string{"up": up, "down": down} {
		for _, flag := range []string{"--kubeconfig", "--namespace", "--context"} {
			if strings.Contains(help, flag) {
				t.Errorf("dev %s --help offers %s, which it does not use", name, flag)
			}
		}
	}
	for _, args := range [][]string{{"dev", "up", "-n", "team-a"}, {"dev", "down", "--kubeconfig", "x"}} {
		if _, _, err := runFleet(t, t.TempDir(), "", args...); err == nil || !strings.Contains(err.Error(), "fleet dev does not use --") {
			t.Errorf("%v: err = %v, want a refusal of the unused flag", args, err)
		}
	}
}
