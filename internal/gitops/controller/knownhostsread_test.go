package controller_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/gitops/git"
)

// TestReadKnownHostsConfigMap pins the one reading of the manager's
// known-hosts ConfigMap that GitRepo clones, their git:: charts and HelmOps
// share, against the real API server: no namespace or no ConfigMap is "no
// known hosts" (not an error, so the fetch reports the missing key), the
// ConfigMap's known_hosts entry is returned as is, and any other failure
// (here a reader without the right to read ConfigMaps) is an error naming
// the ConfigMap that keeps the API error for callers to classify.
func TestReadKnownHostsConfigMap(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "read-known-hosts")

	for _, n := range []string{"", ns} {
		kh, err := git.ReadKnownHostsConfigMap(ctx, env.Client, n)
		if err != nil || kh != nil {
			t.Fatalf("namespace %q without ConfigMap: %q, %v; want none and no error", n, kh, err)
		}
	}

	const line = "git.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: git.KnownHostsConfigMap},
		Data:       map[string]string{git.KeyKnownHosts: line},
	}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	kh, err := git.ReadKnownHostsConfigMap(ctx, env.Client, ns)
	if err != nil || string(kh) != line {
		t.Fatalf("with ConfigMap: %q, %v; want %q", kh, err, line)
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "read-known-hosts-nobody"}
	nobody, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kh, err = git.ReadKnownHostsConfigMap(ctx, nobody, ns)
	if !apierrors.IsForbidden(err) || kh != nil {
		t.Fatalf("reader without rights: %q, %v; want a Forbidden error", kh, err)
	}
	if want := "reading ConfigMap " + ns + "/" + git.KnownHostsConfigMap + ": "; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %q does not start with %q", err, want)
	}
}
