package bundlereader

import (
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// TestChartFromGitHostKeyPolicy: a git:: chart over SSH follows the host
// key policy of the GitRepos: strict by default, with errors that name the
// server whose key is missing or wrong, and, only while host key checks
// are turned off for the process (the manager's insecureSkipHostKeyChecks,
// which governs the GitRepos' clones too), reached without known_hosts or
// with known_hosts that do not match. Not parallel: the setting is
// process-wide.
func TestChartFromGitHostKeyPolicy(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "charts")
	repo.Commit("master", map[string]string{
		"app/Chart.yaml":        "apiVersion: v2\nname: app\nversion: 2.0.0\n",
		"app/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n",
	})
	srv := gittest.NewSSHServer(t, root)
	other := gittest.NewSSHServer(t, t.TempDir())
	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: git::" + srv.URLFor(repo) + "//app\n"})
	host := strings.Fields(string(srv.KnownHosts))[0]
	otherKey := strings.SplitN(strings.TrimSpace(string(other.KnownHosts)), " ", 2)[1]
	wrongKey := []byte(host + " " + otherKey + "\n")
	otherHostOnly := []byte("github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
	auth := func(kh []byte) Options {
		return Options{Auth: HelmAuth{SSHPrivateKey: srv.ClientKeyPEM, SSHKnownHosts: kh}}
	}

	for name, tc := range map[string]struct {
		knownHosts []byte
		want       []string
	}{
		"no known hosts":     {want: []string{"needs known_hosts to verify the SSH server " + srv.Addr, "FLEET_KNOWN_HOSTS", "ConfigMap known-hosts"}},
		"host not listed":    {knownHosts: otherHostOnly, want: []string{"SSH server " + srv.Addr + " is not in known_hosts"}},
		"key does not match": {knownHosts: wrongKey, want: []string{"SSH server " + srv.Addr + " presented a host key that does not match its known_hosts entry"}},
	} {
		t.Run("strict/"+name, func(t *testing.T) {
			_, err := readOne(t, dir, auth(tc.knownHosts))
			if err == nil {
				t.Fatal("the chart was read without verifying the server")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to say %q", err, want)
				}
			}
			noKeyMaterial(t, err.Error(), srv.ClientKeyPEM)
		})
	}

	git.SetInsecureSkipHostKeyChecks(true)
	t.Cleanup(func() { git.SetInsecureSkipHostKeyChecks(false) })
	for name, kh := range map[string][]byte{"no known hosts": nil, "key does not match": wrongKey} {
		t.Run("insecure/"+name, func(t *testing.T) {
			b, err := readOne(t, dir, auth(kh))
			if err != nil {
				t.Fatal(err)
			}
			mustHaveChart(t, b, b.Spec.Helm, "app", "2.0.0")
		})
	}
	// The key is still required, and still checked, without host keys.
	if _, err := readOne(t, dir, Options{Auth: HelmAuth{SSHPrivateKey: other.ClientKeyPEM}}); err == nil ||
		!strings.Contains(err.Error(), "unable to authenticate") {
		t.Errorf("insecure, wrong key: err = %v", err)
	}

	git.SetInsecureSkipHostKeyChecks(false)
	if _, err := readOne(t, dir, auth(wrongKey)); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("strict again, wrong known_hosts: err = %v", err)
	}
}
