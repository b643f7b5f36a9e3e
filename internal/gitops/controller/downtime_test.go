package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// fetchesOf counts the fetches (not the ref lookups) of one repository
// through p.
func fetchesOf(p *countingProxy, repo string) int {
	n := 0
	for _, r := range p.Requests() {
		if strings.HasPrefix(r, "POST /"+repo+"/") && strings.Contains(r, "upload-pack") {
			n++
		}
	}
	return n
}

// downtimeRepos are the GitRepos of TestConvergesAfterDowntime by name,
// with their namespaces: "partly" loses one Bundle and "wholly" all of
// them while the manager is down, the Policy of "tenant"'s namespace gets
// another defaultServiceAccount, nothing of "steady" changes, and the
// Bundles of "upgraded" lose their build record, as if written by a
// version before it.
var downtimeRepos = map[string]string{"partly": "down", "wholly": "down", "steady": "down", "tenant": "down-tenant", "upgraded": "down"}

// TestConvergesAfterDowntime: what changed while no manager ran is caught
// up by the next one, from the commit already applied and without a new
// commit or a poll: a Bundle deleted by hand comes back with the same
// spec, so do all the Bundles of a GitRepo when every one was deleted,
// and a Policy's new defaultServiceAccount reaches the Bundles. Each of
// those is fetched once, not on every reconcile; a GitRepo where nothing
// changed is not fetched at all. It runs on a cluster of its own, since
// the package's shared manager cannot be restarted.
func TestConvergesAfterDowntime(t *testing.T) {
	ctx := context.Background()
	cluster, err := testenv.Start(testenv.Options{Name: "gitops-downtime"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	c := cluster.Client
	for _, ns := range []string{"down", "down-tenant"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	policy := &fleet.Policy{ObjectMeta: metav1.ObjectMeta{Namespace: "down-tenant", Name: "p"},
		GitRepo: &fleet.GitRepoPolicy{DefaultServiceAccount: "tenant-1"}}
	if err := c.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	commits := map[string]string{}
	for name := range downtimeRepos {
		commits[name] = gittest.NewRepo(t, root, name).Commit("master", map[string]string{
			"apps/one/cm.yaml": configMap("one", "v1"),
			"apps/two/cm.yaml": configMap("two", "v1"),
		})
	}
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	proxy := newCountingProxy(t, srv.URL)

	stop := startManager(t, cluster)
	for name, ns := range downtimeRepos {
		// Polling is an hour away: only the restart can bring back what
		// changed.
		if err := c.Create(ctx, &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: fleet.GitRepoSpec{Repo: proxy.URL + "/" + name, Paths: []string{"apps/*"},
				PollingInterval: &metav1.Duration{Duration: time.Hour}}}); err != nil {
			t.Fatal(err)
		}
	}
	for name, ns := range downtimeRepos {
		waitConverged(t, c, ns, name, commits[name])
	}
	before := map[string]fleet.Bundle{}
	for name, ns := range downtimeRepos {
		for bn, b := range listBundles(t, c, ns, name) {
			before[bn] = b
		}
	}
	stop()

	// While no manager runs. The Bundle controller's finalizer keeps the
	// deleted Bundles, being deleted, until the next manager runs.
	for _, bn := range []string{"partly-apps-one", "wholly-apps-one", "wholly-apps-two"} {
		b := before[bn]
		if err := c.Delete(ctx, &b); err != nil {
			t.Fatal(err)
		}
	}
	for bn, b := range listBundles(t, c, "down", "upgraded") {
		patch := []byte(`{"metadata":{"annotations":{"` + gitops.BuildAnnotation + `":null}}}`)
		if err := c.Patch(ctx, &b, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("bundle %s: %v", bn, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
		t.Fatal(err)
	}
	policy.GitRepo.DefaultServiceAccount = "tenant-2"
	if err := c.Update(ctx, policy); err != nil {
		t.Fatal(err)
	}
	fetched := map[string]int{}
	for name := range downtimeRepos {
		fetched[name] = fetchesOf(proxy, name)
	}

	stop = startManager(t, cluster)
	t.Cleanup(stop)
	fleettest.Eventually(t, timeout, func() error {
		for _, bn := range []string{"partly-apps-one", "wholly-apps-one", "wholly-apps-two"} {
			if err := rebuiltAsBefore(t, c, before[bn]); err != nil {
				return err
			}
		}
		for bn, b := range listBundles(t, c, "down-tenant", "tenant") {
			if b.Spec.ServiceAccount != "tenant-2" {
				return fmt.Errorf("bundle %s: serviceAccount %q, want the Policy's new default", bn, b.Spec.ServiceAccount)
			}
		}
		return nil
	})
	for name, ns := range downtimeRepos {
		waitConverged(t, c, ns, name, commits[name])
	}
	// "upgraded" is trusted as it is: an upgrade fetches no GitRepo.
	// ... and gets the record, so that the next restart checks it.
	fleettest.Eventually(t, timeout, func() error {
		for bn, b := range listBundles(t, c, "down", "upgraded") {
			if b.Annotations[gitops.BuildAnnotation] == "" {
				return fmt.Errorf("bundle %s has no build record yet", bn)
			}
		}
		return nil
	})
	want := map[string]int{"partly": 1, "wholly": 1, "steady": 0, "tenant": 1, "upgraded": 0}
	fleettest.Consistently(t, 5*time.Second, func() error {
		for name, n := range want {
			if got := fetchesOf(proxy, name) - fetched[name]; got != n {
				return fmt.Errorf("%s fetched %d times since the restart, want %d", name, got, n)
			}
		}
		return nil
	})
}

// listBundles reads the Bundles of a GitRepo from c, by name.
func listBundles(t testing.TB, c client.Client, ns, repo string) map[string]fleet.Bundle {
	t.Helper()
	var list fleet.BundleList
	if err := c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{fleet.RepoLabel: repo}); err != nil {
		t.Fatal(err)
	}
	out := map[string]fleet.Bundle{}
	for _, b := range list.Items {
		out[b.Name] = b
	}
	return out
}

// waitConverged waits until the GitRepo shows commit applied and
// Ready=True (BundlesReady) with two Bundles of that commit, none being
// deleted.
func waitConverged(t testing.TB, c client.Client, ns, name, commit string) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		r := &fleet.GitRepo{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, r); err != nil {
			return err
		}
		if r.Status.Commit != commit {
			return fmt.Errorf("%s: commit %q, want %q", name, r.Status.Commit, commit)
		}
		bundles := listBundles(t, c, ns, name)
		if len(bundles) != 2 {
			return fmt.Errorf("%s: %d bundles, want 2", name, len(bundles))
		}
		for bn, b := range bundles {
			if b.DeletionTimestamp != nil || b.Labels[fleet.CommitLabel] != commit {
				return fmt.Errorf("bundle %s: deleting %v, commit %q", bn, b.DeletionTimestamp != nil, b.Labels[fleet.CommitLabel])
			}
		}
		if rc := condition(r, fleet.ConditionReady); rc == nil || rc.Status != metav1.ConditionTrue || rc.Reason != gitops.ReasonBundlesReady {
			return fmt.Errorf("%s: Ready = %+v", name, rc)
		}
		return nil
	})
}

// rebuiltAsBefore says whether old was created again (another UID, not
// being deleted) with the same spec and commit.
func rebuiltAsBefore(t testing.TB, c client.Client, old fleet.Bundle) error {
	cur := &fleet.Bundle{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(&old), cur); err != nil {
		return fmt.Errorf("bundle %s: %w", old.Name, err)
	}
	switch {
	case cur.UID == old.UID || cur.DeletionTimestamp != nil:
		return fmt.Errorf("bundle %s not recreated yet", old.Name)
	case specJSON(t, *cur) != specJSON(t, old):
		return fmt.Errorf("bundle %s recreated with spec %s, want %s", old.Name, specJSON(t, *cur), specJSON(t, old))
	case cur.Labels[fleet.CommitLabel] != old.Labels[fleet.CommitLabel]:
		return fmt.Errorf("bundle %s recreated from commit %q, want %q", old.Name, cur.Labels[fleet.CommitLabel], old.Labels[fleet.CommitLabel])
	}
	return nil
}
