package controller_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// TestSSHKnownHostsFromConfigMap: a GitRepo cloned over SSH whose Secret
// holds only the key is verified against the manager's known-hosts
// ConfigMap (as in Fleet, whose chart ships one): without it the GitRepo is
// refused with a message naming both places and Stalled; with the server's
// key in the ConfigMap it syncs; a Secret's own known_hosts still wins.
func TestSSHKnownHostsFromConfigMap(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "ssh-known-hosts")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewSSHServer(t, root)
	other := gittest.NewSSHServer(t, t.TempDir())
	secret(t, ns, "key-only", corev1.SecretTypeSSHAuth, map[string][]byte{corev1.SSHAuthPrivateKey: srv.ClientKeyPEM})

	createRepo(t, ns, "neither", fleet.GitRepoSpec{Repo: srv.URLFor(repo), ClientSecretName: "key-only"})
	waitPollError(t, ns, "neither", "ConfigMap "+git.KnownHostsConfigMap)
	if s := condition(getRepo(t, ns, "neither"), fleet.ConditionStalled); s == nil || s.Status != metav1.ConditionTrue {
		t.Fatalf("no known_hosts anywhere is not stalled: %+v", s)
	}

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: git.KnownHostsConfigMap},
		Data: map[string]string{git.KeyKnownHosts: "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n" +
			string(srv.KnownHosts)},
	}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	createRepo(t, ns, "from-configmap", fleet.GitRepoSpec{Repo: srv.URLFor(repo), ClientSecretName: "key-only"})
	waitSynced(t, ns, "from-configmap", c1, 1)

	// known_hosts in the Secret, naming the host with another key: the
	// ConfigMap is not consulted, the server is refused.
	host := strings.Fields(string(srv.KnownHosts))[0]
	wrongKey := strings.SplitN(strings.TrimSpace(string(other.KnownHosts)), " ", 2)[1]
	secret(t, ns, "own-known-hosts", corev1.SecretTypeSSHAuth, map[string][]byte{
		corev1.SSHAuthPrivateKey: srv.ClientKeyPEM, git.KeyKnownHosts: []byte(host + " " + wrongKey + "\n"),
	})
	createRepo(t, ns, "secret-wins", fleet.GitRepoSpec{Repo: srv.URLFor(repo), ClientSecretName: "own-known-hosts"})
	waitPollError(t, ns, "secret-wins", "host key")
	for _, name := range []string{"neither", "secret-wins"} {
		if n := len(bundlesOf(t, ns, name)); n != 0 {
			t.Fatalf("%s produced %d bundles", name, n)
		}
	}
}
