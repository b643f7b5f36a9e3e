package controller_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestHelmSecretForPathsWithoutKey: a helmSecretNameForPaths Secret
// without the secrets-path.yaml key is refused (Accepted False, Stalled,
// reason InvalidSpec, a Warning event naming the Secret and the key), as
// Rancher Fleet fails on the missing file, instead of being read as "no
// credentials for any path" (helmSecretName ignored too). The Bundle the
// GitRepo deployed before stays.
func TestHelmSecretForPathsWithoutKey(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "helm-paths-nokey")
	root := t.TempDir()
	apps := gittest.NewRepo(t, root, "apps")
	c1 := apps.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	secret(t, ns, "by-path", corev1.SecretTypeOpaque, map[string][]byte{
		"secrets-path.yaml": []byte(".:\n  username: alice\n  password: s3cret\n"),
	})
	// The key under a wrong name, as a user may write it.
	secret(t, ns, "no-key", corev1.SecretTypeOpaque, map[string][]byte{
		"secrets-paths.yaml": []byte(".:\n  username: alice\n  password: s3cret\n"),
	})

	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: srv.URLFor(apps), HelmSecretName: "by-path", HelmSecretNameForPaths: "by-path"})
	waitSynced(t, ns, "app", c1, 1)
	before := bundlesOf(t, ns, "app")

	patchRepo(t, ns, "app", func(r *fleet.GitRepo) { r.Spec.HelmSecretNameForPaths = "no-key" })
	const want = `helm secret for paths "no-key" has no key secrets-path.yaml`
	waitStalled(t, ns, "app", fleet.ConditionAccepted, want)
	r := getRepo(t, ns, "app")
	if c := condition(r, fleet.ConditionAccepted); c.Reason != "InvalidSpec" {
		t.Fatalf("accepted = %+v, want reason InvalidSpec", c)
	}
	if c := condition(r, fleet.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Message != want {
		t.Fatalf("ready = %+v", c)
	}
	if r.Status.Commit != c1 {
		t.Fatalf("commit %q, want %q kept", r.Status.Commit, c1)
	}
	fleettest.Eventually(t, timeout, func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "app" && e.Reason == "InvalidSpec" && e.Note == want {
				return nil
			}
		}
		return fmt.Errorf("no InvalidSpec event %q among %d", want, len(evs.Items))
	})
	after := bundlesOf(t, ns, "app")
	if len(after) != len(before) {
		t.Fatalf("bundles %v, want %v kept", keysOf(after), keysOf(before))
	}
	for name, b := range before {
		if a, ok := after[name]; !ok || a.UID != b.UID || a.DeletionTimestamp != nil {
			t.Fatalf("bundle %s was replaced or is being deleted", name)
		}
	}
}

// TestHelmSecretForPathsEmptyKey: an empty secrets-path.yaml value is an
// empty YAML document, as Rancher Fleet parses its file: no per-path
// entries, so the GitRepo syncs (Accepted True) with no helm credentials
// for any path, rather than being refused like a missing key.
func TestHelmSecretForPathsEmptyKey(t *testing.T) {
	ns := newNamespace(t, "helm-paths-empty")
	root := t.TempDir()
	apps := gittest.NewRepo(t, root, "apps")
	c1 := apps.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	secret(t, ns, "empty", corev1.SecretTypeOpaque, map[string][]byte{"secrets-path.yaml": {}})

	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: srv.URLFor(apps), HelmSecretNameForPaths: "empty"})
	waitSynced(t, ns, "app", c1, 1)
	r := getRepo(t, ns, "app")
	if c := condition(r, fleet.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("accepted = %+v, want True", c)
	}
	if c := condition(r, fleet.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
		t.Fatalf("stalled = %+v", c)
	}
}
