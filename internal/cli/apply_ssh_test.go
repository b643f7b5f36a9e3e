package cli

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// sshChartServer serves a chart repository over SSH: charts/app at 1.0.0
// (tag v1.0.0, ConfigMap data "one"), then 1.1.0 on master.
func sshChartServer(t *testing.T) (*gittest.SSHServer, string) {
	t.Helper()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "charts")
	repo.Commit("master", map[string]string{
		"charts/app/Chart.yaml":        "apiVersion: v2\nname: app\nversion: 1.0.0\n",
		"charts/app/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  v: one\n",
	})
	repo.Tag("v1.0.0")
	repo.Commit("master", map[string]string{"charts/app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 1.1.0\n"})
	srv := gittest.NewSSHServer(t, root)
	return srv, "git::" + srv.URLFor(repo) + "//charts/app?ref=v1.0.0"
}

// writeFiles writes name → content under a new directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// noKeyIn fails when s holds a line of key: errors and output are shown
// to users and kept in CI logs.
func noKeyIn(t *testing.T, what, s string, key []byte) {
	t.Helper()
	for _, line := range strings.Split(string(key), "\n") {
		if len(line) > 8 && strings.Contains(s, line) {
			t.Fatalf("%s holds key material: %s", what, s)
		}
	}
}

// TestApplySSHPrivateKeyFile: `fleet apply --ssh-privatekey-file` builds
// a bundle from a git:: chart on an SSH server, verified against
// SSH_KNOWN_HOSTS, and writes it to the cluster; a missing, wrong or
// unreadable key, or no known hosts, fails before anything is written,
// saying what is wrong and never showing the key.
func TestApplySSHPrivateKeyFile(t *testing.T) {
	env := startManager(t)
	ws := newWorkspace(t, env, "ssh-chart")
	srv, chart := sshChartServer(t)
	other := gittest.NewSSHServer(t, t.TempDir())
	keys := writeFiles(t, map[string]string{"good": string(srv.ClientKeyPEM), "wrong": string(other.ClientKeyPEM), "empty": "\n"})
	dir := writeFiles(t, map[string]string{"app/fleet.yaml": "helm:\n  chart: " + chart + "\n"})
	t.Setenv(knownHostsEnv, string(srv.KnownHosts))

	for name, tc := range map[string]struct {
		args         []string
		noKnownHosts bool
		want         string
	}{
		"no key":         {want: "no SSH private key is set"},
		"wrong key":      {args: []string{"--ssh-privatekey-file", filepath.Join(keys, "wrong")}, want: "unable to authenticate"},
		"unreadable key": {args: []string{"--ssh-privatekey-file", filepath.Join(keys, "missing")}, want: "--ssh-privatekey-file: open "},
		"empty key":      {args: []string{"--ssh-privatekey-file", filepath.Join(keys, "empty")}, want: "is empty"},
		"no known hosts": {args: []string{"--ssh-privatekey-file", filepath.Join(keys, "good")}, noKnownHosts: true, want: "needs known_hosts"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.noKnownHosts {
				t.Setenv(knownHostsEnv, "")
			}
			args := append([]string{"--kubeconfig", env.Kubeconfig, "-n", ws, "apply", "r", "app", "-l", fleet.RepoLabel + "=r"}, tc.args...)
			out, stderr, err := runFleet(t, dir, "", args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			for what, s := range map[string]string{"error": err.Error(), "stdout": out, "stderr": stderr} {
				noKeyIn(t, what, s, srv.ClientKeyPEM)
				noKeyIn(t, what, s, other.ClientKeyPEM)
			}
			var list fleet.BundleList
			if err := env.Client.List(context.Background(), &list, client.InNamespace(ws)); err != nil || len(list.Items) != 0 {
				t.Fatalf("%d bundles written despite the error (%v)", len(list.Items), err)
			}
		})
	}

	out, stderr, err := runFleet(t, dir, "", "--kubeconfig", env.Kubeconfig, "-n", ws, "apply", "r", "app",
		"-l", fleet.RepoLabel+"=r", "--ssh-privatekey-file", filepath.Join(keys, "good"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "bundle "+ws+"/r-app created") || strings.Contains(stderr, "ssh-privatekey-file") {
		t.Errorf("stdout %q stderr %q", out, stderr)
	}
	noKeyIn(t, "output", out+stderr, srv.ClientKeyPEM)
	b := &fleet.Bundle{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ws, Name: "r-app"}, b); err != nil {
		t.Fatal(err)
	}
	if h := b.Spec.Helm; h == nil || h.Version != "1.0.0" || !strings.HasPrefix(h.Chart, ".chart/") {
		t.Fatalf("helm = %+v, want the chart of tag v1.0.0 inside the bundle", b.Spec.Helm)
	}
	if got := resourceOf(b, b.Spec.Helm.Chart+"/templates/cm.yaml"); !strings.Contains(got, "v: one") {
		t.Errorf("chart template %q, want the v1.0.0 one", got)
	}
}

// TestApplySSHKeyByPath: --helm-credentials-by-path-file takes Fleet's
// sshPrivateKey (base64 of the PEM, as in secrets-path.yaml) for the
// bundle at that path; other paths do not get it.
func TestApplySSHKeyByPath(t *testing.T) {
	srv, chart := sshChartServer(t)
	t.Setenv(knownHostsEnv, string(srv.KnownHosts))
	fleetYAML := "helm:\n  chart: " + chart + "\n"
	dir := writeFiles(t, map[string]string{"app/fleet.yaml": fleetYAML, "other/fleet.yaml": fleetYAML})
	byPath := writeFiles(t, map[string]string{"creds.yaml": "app:\n  sshPrivateKey: " + base64.StdEncoding.EncodeToString(srv.ClientKeyPEM) + "\n"})
	creds := filepath.Join(byPath, "creds.yaml")

	out, _, err := runFleet(t, dir, "", "apply", "-o", "-", "r", "app", "--helm-credentials-by-path-file", creds)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "version: 1.0.0") || !strings.Contains(out, "v: one") {
		t.Errorf("bundle lacks the chart of v1.0.0:\n%s", out)
	}
	noKeyIn(t, "output", out, srv.ClientKeyPEM)
	if _, _, err := runFleet(t, dir, "", "apply", "-o", "-", "r", "other", "--helm-credentials-by-path-file", creds); err == nil ||
		!strings.Contains(err.Error(), "no SSH private key is set") {
		t.Errorf("other path: err = %v, want no key", err)
	}
}

func resourceOf(b *fleet.Bundle, name string) string {
	for _, r := range b.Spec.Resources {
		if r.Name == name {
			return r.Content
		}
	}
	return ""
}
