package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// specJSON is a Bundle's spec as stored, for comparing a rebuilt Bundle
// with the one it replaces.
func specJSON(t testing.TB, b fleet.Bundle) string {
	t.Helper()
	out, err := json.Marshal(b.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// waitReady waits until Ready=True (BundlesReady) with n Bundles.
func waitReady(t testing.TB, ns, name string, n int) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		if got := len(bundlesOf(t, ns, name)); got != n {
			return fmt.Errorf("%d bundles, want %d", got, n)
		}
		c := condition(getRepo(t, ns, name), fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != gitops.ReasonBundlesReady {
			return fmt.Errorf("Ready = %+v", c)
		}
		return nil
	})
}

// TestHandDeletedBundleIsRebuilt: a Bundle of a GitRepo deleted by hand
// (kubectl delete bundle) comes back with the same spec from the commit
// already applied, without a new commit and long before the next poll,
// as a HelmOp's does: git is what should be deployed.
func TestHandDeletedBundleIsRebuilt(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "handdel")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "apps")
	c1 := repo.Commit("master", map[string]string{
		"apps/one/cm.yaml": configMap("one", "v1"),
		"apps/two/cm.yaml": configMap("two", "v1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	// Polling is an hour away: only the deletion can bring the Bundle back.
	createRepo(t, ns, "web", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"apps/*"},
		PollingInterval: &metav1.Duration{Duration: time.Hour}})
	waitSynced(t, ns, "web", c1, 2)
	waitReady(t, ns, "web", 2)

	old := bundlesOf(t, ns, "web")["web-apps-one"]
	want := specJSON(t, old)
	if err := env.Client.Delete(ctx, &old); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		b, ok := bundlesOf(t, ns, "web")["web-apps-one"]
		switch {
		case !ok:
			return fmt.Errorf("bundle web-apps-one not recreated")
		case b.UID == old.UID:
			return fmt.Errorf("bundle web-apps-one not deleted yet")
		case b.DeletionTimestamp != nil:
			return fmt.Errorf("bundle web-apps-one being deleted")
		case specJSON(t, b) != want:
			return fmt.Errorf("recreated spec %s, want %s", specJSON(t, b), want)
		case b.Labels[fleet.CommitLabel] != c1:
			return fmt.Errorf("recreated from commit %q, want %q", b.Labels[fleet.CommitLabel], c1)
		}
		return nil
	})
	waitReady(t, ns, "web", 2)
	if r := getRepo(t, ns, "web"); r.Status.Commit != c1 {
		t.Fatalf("status.commit %q, want %q", r.Status.Commit, c1)
	}
}

// TestHandDeletedBundleNotReadyMeanwhile: while a hand-deleted Bundle is
// still going (a finalizer holds it), the GitRepo is not Ready and waits:
// writing the Bundle then would fail (apply.ErrBeingDeleted) and show as
// a failed apply, backed off. It is rebuilt once it has gone.
func TestHandDeletedBundleNotReadyMeanwhile(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "handdel-held")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "apps")
	c1 := repo.Commit("master", map[string]string{
		"apps/one/cm.yaml": configMap("one", "v1"),
		"apps/two/cm.yaml": configMap("two", "v1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	createRepo(t, ns, "web", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"apps/*"},
		PollingInterval: &metav1.Duration{Duration: time.Hour}})
	waitSynced(t, ns, "web", c1, 2)
	waitReady(t, ns, "web", 2)

	const hold = "test.fleetgo.io/hold"
	old := bundlesOf(t, ns, "web")["web-apps-one"]
	patch := client.MergeFrom(old.DeepCopy())
	controllerutil.AddFinalizer(&old, hold)
	if err := env.Client.Patch(ctx, &old, patch); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, &old); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		c := condition(getRepo(t, ns, "web"), fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("Ready = %+v while web-apps-one is being deleted", c)
		}
		return nil
	})
	fleettest.Consistently(t, 3*time.Second, func() error {
		r := getRepo(t, ns, "web")
		if c := condition(r, fleet.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != gitops.ReasonNotReady {
			return fmt.Errorf("Ready = %+v while web-apps-one is being deleted", c)
		}
		return nil
	})

	fleettest.Eventually(t, timeout, func() error {
		cur := &fleet.Bundle{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&old), cur); err != nil {
			return err
		}
		patch := client.MergeFrom(cur.DeepCopy())
		controllerutil.RemoveFinalizer(cur, hold)
		return env.Client.Patch(ctx, cur, patch)
	})
	fleettest.Eventually(t, timeout, func() error {
		b, ok := bundlesOf(t, ns, "web")["web-apps-one"]
		if !ok || b.UID == old.UID || b.DeletionTimestamp != nil {
			return fmt.Errorf("bundle web-apps-one not recreated (present %v)", ok)
		}
		return nil
	})
	waitReady(t, ns, "web", 2)
}

// TestPruneDoesNotRebuild: a Bundle the GitRepo prunes itself (its path
// removed by a new commit) is not taken for a hand-deleted one: the new
// commit is fetched once, and nothing is fetched again for the prune.
func TestPruneDoesNotRebuild(t *testing.T) {
	ns := newNamespace(t, "handdel-prune")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "apps")
	c1 := repo.Commit("master", map[string]string{
		"apps/one/cm.yaml": configMap("one", "v1"),
		"apps/two/cm.yaml": configMap("two", "v1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	proxy := newCountingProxy(t, srv.URL)
	createRepo(t, ns, "web", fleet.GitRepoSpec{Repo: proxy.URLFor(repo), Paths: []string{"apps/*"},
		PollingInterval: &metav1.Duration{Duration: time.Second}})
	waitSynced(t, ns, "web", c1, 2)
	waitReady(t, ns, "web", 2)

	before := fetches(proxy)
	repo.RemovePath("apps/two")
	c2 := repo.Commit("master", nil)
	waitSynced(t, ns, "web", c2, 1)
	waitReady(t, ns, "web", 1)
	// Several polls, and time for the pruned Bundle's deletion events.
	fleettest.Consistently(t, 5*time.Second, func() error {
		if n := fetches(proxy) - before; n != 1 {
			return fmt.Errorf("%d fetches since %s was pushed, want 1: the prune caused a rebuild", n, c2)
		}
		return nil
	})
}
