package controller_test

import (
	"context"
	"fmt"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestResourceCountsFromRepoDeployments: the GitRepo's resource counts add
// up exactly the BundleDeployments labelled with its name and namespace,
// in whatever cluster namespace they are (read through the controller's
// informer index, not a label selector): not those of a GitRepo of the
// same name in another namespace, nor another GitRepo's.
func TestResourceCountsFromRepoDeployments(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "counts")
	otherNS := newNamespace(t, "counts-other")
	cns1, cns2 := newNamespace(t, "counts-c1"), newNamespace(t, "counts-c2")
	bd := func(bdNS, name, repo, bundleNS, cluster string, rc fleet.ResourceCounts) {
		t.Helper()
		b := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: bdNS, Name: name, Labels: map[string]string{
			fleet.RepoLabel: repo, fleet.BundleNamespaceLabel: bundleNS, fleet.ClusterNamespaceLabel: ns, fleet.ClusterLabel: cluster,
		}}}
		if err := env.Client.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		b.Status.ResourceCounts = rc
		if err := env.Client.Status().Update(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	bd(cns1, "mine", "counted", ns, "c1", fleet.ResourceCounts{Ready: 2, DesiredReady: 2})
	bd(cns2, "mine", "counted", ns, "c2", fleet.ResourceCounts{NotReady: 1, DesiredReady: 1})
	bd(cns1, "same-name-other-ns", "counted", otherNS, "c1", fleet.ResourceCounts{Ready: 100, DesiredReady: 100})
	bd(cns2, "other-repo", "other", ns, "c3", fleet.ResourceCounts{Ready: 100, DesiredReady: 100})

	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "counts")
	c := repo.Commit("main", map[string]string{"cm.yaml": configMap("counts", "0")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	createRepo(t, ns, "counted", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Branch: "main", DisablePolling: true})
	waitSynced(t, ns, "counted", c, 1)
	want := fleet.ResourceCounts{Ready: 2, NotReady: 1, DesiredReady: 3}
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "counted")
		if r.Status.ResourceCounts != want {
			return fmt.Errorf("resource counts %+v, want %+v", r.Status.ResourceCounts, want)
		}
		var clusters []string
		for k := range r.Status.PerClusterResourceCounts {
			clusters = append(clusters, k)
		}
		sort.Strings(clusters)
		if fmt.Sprint(clusters) != fmt.Sprint([]string{ns + "/c1", ns + "/c2"}) {
			return fmt.Errorf("per-cluster counts for %v", clusters)
		}
		return nil
	})
}
