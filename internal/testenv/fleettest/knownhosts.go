package fleettest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/gitops/git"
)

// GitHubKnownHosts is a known_hosts line for github.com: a ConfigMap with
// only it does not list a test's own SSH server, so the server must be
// refused as unknown.
const GitHubKnownHosts = "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"

// SetKnownHostsConfigMap creates or replaces the manager's known-hosts
// ConfigMap (git.KnownHostsConfigMap in namespace, the manager's) with
// content, as a user does who lists SSH servers for GitRepos and HelmOps.
// It is deleted when the test ends, so that the other tests see none.
func SetKnownHostsConfigMap(t testing.TB, c client.Client, namespace, content string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: git.KnownHostsConfigMap},
		Data:       map[string]string{git.KeyKnownHosts: content},
	}
	err := c.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		old := &corev1.ConfigMap{}
		if err = c.Get(ctx, client.ObjectKeyFromObject(cm), old); err == nil {
			old.Data = cm.Data
			err = c.Update(ctx, old)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), cm) })
}
