package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryCommandExplainsMissingKubeconfig: every command that connects to
// the manager cluster, not only status, says how to give a kubeconfig when
// there is none, instead of client-go's "try setting KUBERNETES_MASTER".
func TestEveryCommandExplainsMissingKubeconfig(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_MASTER", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, tc := range []struct {
		name string
		dir  string
		args []string
	}{
		{name: "status", args: []string{"status", "--once"}},
		{name: "install agent-token", args: []string{"install", "agent-token", "-t", "-5m"}},
		{name: "apply", dir: corpusDir, args: []string{"apply", "simple", "simple"}},
		{name: "target", args: []string{"target", "simple"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir
			if dir == "" {
				dir = t.TempDir()
			}
			t.Setenv("KUBECONFIG", "/nonexistent")
			_, _, err := runFleet(t, dir, "", tc.args...)
			want := "no kubeconfig for the manager cluster: pass --kubeconfig (-k) or set KUBECONFIG (KUBECONFIG=/nonexistent names no existing file)"
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "KUBERNETES_MASTER") {
				t.Errorf("fleet %s with KUBECONFIG=/nonexistent: want %q, got %v", strings.Join(tc.args, " "), want, err)
			}

			// An explicit --kubeconfig that is not there is client-go's
			// error, said to come from the kubeconfig.
			t.Setenv("KUBECONFIG", "")
			missing := filepath.Join(t.TempDir(), "kubeconfig")
			_, _, err = runFleet(t, dir, "", append(tc.args, "--kubeconfig", missing)...)
			if err == nil || !strings.Contains(err.Error(), "loading the kubeconfig of the manager cluster:") || !strings.Contains(err.Error(), missing) {
				t.Errorf("fleet %s --kubeconfig %s: %v", strings.Join(tc.args, " "), missing, err)
			}
		})
	}
}
