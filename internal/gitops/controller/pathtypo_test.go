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

// TestPathTypoKeepsBundles: a GitRepo whose paths are edited to a typo
// (infar for infra), or whose commit removes a directory its paths still
// name, keeps every Bundle it deployed (same UIDs, none being deleted) and
// shows the error: Ready False with reason BuildFailed, Stalled, an error
// display and a Warning event. Rancher Fleet would skip the path and prune
// the Bundle, deleting its workloads while the GitRepo shows Ready.
func TestPathTypoKeepsBundles(t *testing.T) {
	ns := newNamespace(t, "path-typo")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{
		"a/cm.yaml":     configMap("a", "1"),
		"infra/cm.yaml": configMap("infra", "1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})

	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"a", "infra"}})
	waitSynced(t, ns, "app", c1, 2)
	before := bundlesOf(t, ns, "app")

	patchRepo(t, ns, "app", func(r *fleet.GitRepo) { r.Spec.Paths = []string{"a", "infar"} })
	wantErr := fmt.Sprintf(`commit %s: path "infar" does not exist`, c1[:12])
	waitPathError(t, ns, "app", wantErr)
	assertBundlesKept(t, ns, "app", before)

	// Fixed: the same Bundles are applied again.
	patchRepo(t, ns, "app", func(r *fleet.GitRepo) { r.Spec.Paths = []string{"a", "infra"} })
	fleettest.Eventually(t, timeout, func() error {
		if c := condition(getRepo(t, ns, "app"), fleet.ConditionStalled); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("stalled %+v", c)
		}
		return nil
	})
	assertBundlesKept(t, ns, "app", before)

	// A commit removing a directory paths still name.
	c2 := repo.Commit("master", map[string]string{"a/cm.yaml": configMap("a", "2"), "infra/cm.yaml": ""})
	wantErr = fmt.Sprintf(`commit %s: path "infra" does not exist`, c2[:12])
	waitPathError(t, ns, "app", wantErr)
	assertBundlesKept(t, ns, "app", before)
	if r := getRepo(t, ns, "app"); r.Status.Commit != c1 {
		t.Fatalf("commit %q, want %q kept", r.Status.Commit, c1)
	}
}

// waitPathError waits until the GitRepo shows the build error want:
// Ready False (BuildFailed), Stalled, display.error and a Warning event.
func waitPathError(t *testing.T, ns, name, want string) {
	t.Helper()
	waitStalled(t, ns, name, fleet.ConditionReady, want)
	r := getRepo(t, ns, name)
	if c := condition(r, fleet.ConditionReady); c.Reason != "BuildFailed" || c.Message != want {
		t.Fatalf("ready = %+v, want reason BuildFailed and message %q", c, want)
	}
	if !r.Status.Display.Error || r.Status.Display.Message != want {
		t.Fatalf("display = %+v, want error %q", r.Status.Display, want)
	}
	fleettest.Eventually(t, timeout, func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning && e.Reason == "BuildFailed" && e.Note == want {
				return nil
			}
		}
		return fmt.Errorf("no BuildFailed event %q among %d", want, len(evs.Items))
	})
}

// assertBundlesKept fails unless the GitRepo's Bundles are exactly before,
// with the same UIDs and none being deleted.
func assertBundlesKept(t *testing.T, ns, name string, before map[string]fleet.Bundle) {
	t.Helper()
	after := bundlesOf(t, ns, name)
	if len(after) != len(before) {
		t.Fatalf("bundles %v, want %v kept", keysOf(after), keysOf(before))
	}
	for n, b := range before {
		if a, ok := after[n]; !ok || a.UID != b.UID || a.DeletionTimestamp != nil {
			t.Fatalf("bundle %s was pruned, replaced or is being deleted", n)
		}
	}
}
