package operations

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/names"
)

func startManager(ctx context.Context, g *WithT, opts manager.Options) {
	opts.MetricsAddr, opts.ProbeAddr, opts.WebhookAddr = "0", "0", "0"
	if opts.Workers == 0 {
		opts.Workers = 2
	}
	mgr, err := manager.New(ctx, upstream.Config, opts)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = mgr.Start(ctx) }()
}

func shardLabels(shard string) map[string]string {
	if shard == "" {
		return nil
	}
	return map[string]string{fleet.ShardLabel: shard}
}

// targetCluster creates workspace ns with Cluster c1 (label env=env) and
// its cluster namespace, with the status registration would give it (no
// registration runs here; the unsharded replica, when it runs, computes
// the same), and returns the cluster namespace.
func targetCluster(ctx context.Context, g *WithT, ns, env string) string {
	up := upstream.Client
	clusterNS := names.ClusterNamespace(ns, "c1")
	g.Expect(up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Expect(up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}})).To(Succeed())
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1", Labels: map[string]string{"env": env}}}
	g.Expect(up.Create(ctx, c)).To(Succeed())
	c.Status.Namespace = clusterNS
	g.Expect(up.Status().Update(ctx, c)).To(Succeed())
	return clusterNS
}

// processed reports whether the Bundle controller has taken the Bundle on
// (finalizer and a status summary for its one target).
func processed(ctx context.Context, g Gomega, ns, name string) bool {
	b := &fleet.Bundle{}
	g.Expect(upstream.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, b)).To(Succeed())
	return controllerutil.ContainsFinalizer(b, bundle.Finalizer) && b.Status.Summary.DesiredReady == 1
}

// TestShardsReconcileOnlyTheirOwn: a Bundle or GitRepo labelled for shard
// "a" or "b" is handled only once that shard's manager runs, its Bundles
// and BundleDeployments carry the shard label, unlabelled objects wait for
// the unsharded manager, and objects of a shard that does not run ("z")
// are never processed.
func TestShardsReconcileOnlyTheirOwn(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up := upstream.Client
	const ns = "shards"
	clusterNS := targetCluster(ctx, g, ns, "shard")

	target := []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "shard"}}}}
	for _, b := range []struct{ name, shard string }{{"bundle-a", "a"}, {"bundle-b", "b"}, {"bundle-none", ""}, {"bundle-z", "z"}} {
		g.Expect(up.Create(ctx, &fleet.Bundle{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: b.name, Labels: shardLabels(b.shard)},
			Spec: fleet.BundleSpec{
				Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: configMap(b.name, "x")}},
				Targets:   target,
			},
		})).To(Succeed())
	}
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "sharded")
	repo.Commit("master", map[string]string{"app/cm.yaml": configMap("app", "v1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	for _, shard := range []string{"a", "b"} {
		g.Expect(up.Create(ctx, &fleet.GitRepo{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo-" + shard, Labels: shardLabels(shard)},
			Spec: fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"app"},
				Targets: []fleet.GitTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "shard"}}}}},
		})).To(Succeed())
	}
	repoCommit := func(g Gomega, name string) string {
		r := &fleet.GitRepo{}
		g.Expect(up.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, r)).To(Succeed())
		return r.Status.Commit
	}

	// Shard a alone: only a's objects move.
	startManager(ctx, g, manager.Options{ShardID: "a"})
	g.Eventually(func(g Gomega) bool { return processed(ctx, g, ns, "bundle-a") }, wait, tick).Should(BeTrue())
	g.Eventually(func(g Gomega) string { return repoCommit(g, "repo-a") }, wait, tick).ShouldNot(BeEmpty())
	// The GitRepo's Bundle and its BundleDeployment carry the shard label
	// and are handled by shard a.
	g.Eventually(func(g Gomega) {
		bundles := &fleet.BundleList{}
		g.Expect(up.List(ctx, bundles, client.InNamespace(ns), client.MatchingLabels{fleet.RepoLabel: "repo-a"})).To(Succeed())
		g.Expect(bundles.Items).To(HaveLen(1))
		g.Expect(bundles.Items[0].Labels).To(HaveKeyWithValue(fleet.ShardLabel, "a"))
		g.Expect(processed(ctx, g, ns, bundles.Items[0].Name)).To(BeTrue())
		bd := &fleet.BundleDeployment{}
		g.Expect(up.Get(ctx, client.ObjectKey{Namespace: clusterNS, Name: bundles.Items[0].Name}, bd)).To(Succeed())
		g.Expect(bd.Labels).To(HaveKeyWithValue(fleet.ShardLabel, "a"))
	}, wait, tick).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(processed(ctx, g, ns, "bundle-b")).To(BeFalse())
		g.Expect(repoCommit(g, "repo-b")).To(BeEmpty())
	}, 5*time.Second, tick).Should(Succeed())

	// Shard b starts: b's objects move too; unlabelled ones and those of
	// shard z (not running) never do.
	startManager(ctx, g, manager.Options{ShardID: "b"})
	g.Eventually(func(g Gomega) bool { return processed(ctx, g, ns, "bundle-b") }, wait, tick).Should(BeTrue())
	g.Eventually(func(g Gomega) string { return repoCommit(g, "repo-b") }, wait, tick).ShouldNot(BeEmpty())
	g.Consistently(func(g Gomega) {
		g.Expect(processed(ctx, g, ns, "bundle-none")).To(BeFalse())
		g.Expect(processed(ctx, g, ns, "bundle-z")).To(BeFalse())
	}, 5*time.Second, tick).Should(Succeed())

	// The unsharded replica takes the unlabelled bundle. It caches every
	// BundleDeployment (for cluster status), yet deletes none of the
	// shards' and never touches shard z's bundle.
	startManager(ctx, g, manager.Options{})
	g.Eventually(func(g Gomega) bool { return processed(ctx, g, ns, "bundle-none") }, wait, tick).Should(BeTrue())
	g.Consistently(func(g Gomega) {
		g.Expect(processed(ctx, g, ns, "bundle-z")).To(BeFalse())
		for _, name := range []string{"bundle-a", "bundle-b", "bundle-none"} {
			g.Expect(up.Get(ctx, client.ObjectKey{Namespace: clusterNS, Name: name}, &fleet.BundleDeployment{})).To(Succeed())
		}
	}, 5*time.Second, tick).Should(Succeed())

	// Deleting a's bundle is finalized by shard a (its BundleDeployment
	// goes), b's stays.
	g.Expect(up.Delete(ctx, &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bundle-a"}})).To(Succeed())
	g.Eventually(func(g Gomega) bool {
		err := up.Get(ctx, client.ObjectKey{Namespace: clusterNS, Name: "bundle-a"}, &fleet.BundleDeployment{})
		return err != nil
	}, wait, tick).Should(BeTrue())
	g.Expect(up.Get(ctx, client.ObjectKey{Namespace: clusterNS, Name: "bundle-b"}, &fleet.BundleDeployment{})).To(Succeed())
}

// TestMoveGitRepoBetweenShards: relabelling a GitRepo from shard "a" to
// shard "b" hands its Bundle and BundleDeployments over at its next commit
// without deleting anything on the way: the deployment keeps its UID (a
// deleted and re-created one would make the agent uninstall and reinstall
// the workload) and ends up labelled for shard b with the new commit's
// content.
func TestMoveGitRepoBetweenShards(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up := upstream.Client
	const ns = "shardmove"
	clusterNS := targetCluster(ctx, g, ns, "move")

	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "moving")
	repo.Commit("master", map[string]string{"app/cm.yaml": configMap("app", "v1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mover", Labels: shardLabels("m1")},
		Spec: fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"app"}, PollingInterval: &metav1.Duration{Duration: time.Second},
			Targets: []fleet.GitTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "move"}}}}},
	}
	g.Expect(up.Create(ctx, gr)).To(Succeed())
	startManager(ctx, g, manager.Options{ShardID: "m1"})
	startManager(ctx, g, manager.Options{ShardID: "m2"})

	deployment := func(g Gomega) *fleet.BundleDeployment {
		bundles := &fleet.BundleList{}
		g.Expect(up.List(ctx, bundles, client.InNamespace(ns), client.MatchingLabels{fleet.RepoLabel: "mover"})).To(Succeed())
		g.Expect(bundles.Items).To(HaveLen(1))
		bd := &fleet.BundleDeployment{}
		g.Expect(up.Get(ctx, client.ObjectKey{Namespace: clusterNS, Name: bundles.Items[0].Name}, bd)).To(Succeed())
		return bd
	}
	var before *fleet.BundleDeployment
	g.Eventually(func(g Gomega) {
		before = deployment(g)
		g.Expect(before.Labels).To(HaveKeyWithValue(fleet.ShardLabel, "m1"))
	}, wait, tick).Should(Succeed())

	g.Expect(up.Get(ctx, client.ObjectKeyFromObject(gr), gr)).To(Succeed())
	gr.Labels = shardLabels("m2")
	g.Expect(up.Update(ctx, gr)).To(Succeed())
	commit := repo.Commit("master", map[string]string{"app/cm.yaml": configMap("app", "v2")})

	g.Eventually(func(g Gomega) {
		bd := deployment(g)
		g.Expect(bd.UID).To(Equal(before.UID), "the deployment was deleted and created again")
		g.Expect(bd.Labels).To(HaveKeyWithValue(fleet.ShardLabel, "m2"))
		g.Expect(bd.Spec.DeploymentID).NotTo(Equal(before.Spec.DeploymentID))
		r := &fleet.GitRepo{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(gr), r)).To(Succeed())
		g.Expect(r.Status.Commit).To(Equal(commit))
	}, wait, tick).Should(Succeed())
	// And it stays: neither shard removes it afterwards.
	g.Consistently(func(g Gomega) {
		g.Expect(deployment(g).UID).To(Equal(before.UID))
	}, 5*time.Second, tick).Should(Succeed())
}
