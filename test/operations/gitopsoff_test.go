package operations

import (
	"context"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/manager"
)

// TestGitOpsDisabledLeavesGitReposAlone: a manager started with GitOps off
// (chart value gitops.enabled=false, fleet-controller --gitops=false) leaves
// a GitRepo exactly as it is — not even its resourceVersion changes: no
// status, no finalizer, no Bundle — while a Bundle beside it still gets its
// BundleDeployment and the GitRepo's earlier Bundle is still held to the
// namespace's GitRepoRestriction. It serves no git webhooks on its webhook address,
// reports no GitRepo in its metrics and holds no GitRepo watch on the API
// server. The manager runs as a shard of its own so that no other test's
// manager can touch these objects.
func TestGitOpsDisabledLeavesGitReposAlone(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up := upstream.Client
	const ns, shard = "gitops-off", "gitops-off"
	clusterNS := targetCluster(ctx, g, ns, "gitops-off")
	targets := []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "gitops-off"}}}}

	// A GitRepo a running GitRepo controller would sync at once (a
	// reachable repository, polled every second).
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "off")
	repo.Commit("master", map[string]string{"app/cm.yaml": configMap("app", "v1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "untouched", Labels: shardLabels(shard)},
		Spec: fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"app"}, PollingInterval: &metav1.Duration{Duration: time.Second},
			Targets: []fleet.GitTarget{{ClusterSelector: targets[0].ClusterSelector}}},
	}
	g.Expect(up.Create(ctx, gr)).To(Succeed())
	created := gr.ResourceVersion
	// A Bundle as `fleet apply` makes it, and one the GitRepo wrote before
	// GitOps was turned off, which the namespace's GitRepoRestriction does
	// not allow: the Bundle controller still reads the GitRepo's URL (from
	// the API server, not a GitRepo informer) and refuses it.
	g.Expect(up.Create(ctx, &fleet.GitRepoRestriction{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns, Name: "only-example"},
		AllowedRepoPatterns: []string{`^https://git\.example\.com/`},
	})).To(Succeed())
	g.Expect(up.Create(ctx, &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "applied", Labels: shardLabels(shard)},
		Spec:       fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: configMap("applied", "x")}}, Targets: targets},
	})).To(Succeed())
	fromRepo := map[string]string{fleet.RepoLabel: gr.Name, fleet.ShardLabel: shard}
	g.Expect(up.Create(ctx, &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "untouched-app", Labels: fromRepo},
		Spec:       fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: configMap("app", "v0")}}, Targets: targets},
	})).To(Succeed())

	metricsAddr, err := freeAddr()
	g.Expect(err).NotTo(HaveOccurred())
	webhookAddr, err := freeAddr()
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := manager.New(ctx, upstream.Config, manager.Options{
		ShardID: shard, DisableGitOps: true, Workers: 2,
		MetricsAddr: metricsAddr, ProbeAddr: "0", WebhookAddr: webhookAddr,
	})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = mgr.Start(ctx) }()

	// Bundles are still targeted and deployed, and restricted.
	g.Eventually(func(g Gomega) {
		g.Expect(processed(ctx, g, ns, "applied")).To(BeTrue())
		g.Expect(up.Get(ctx, client.ObjectKey{Namespace: clusterNS, Name: "applied"}, &fleet.BundleDeployment{})).To(Succeed())
		b := &fleet.Bundle{}
		g.Expect(up.Get(ctx, client.ObjectKey{Namespace: ns, Name: "untouched-app"}, b)).To(Succeed())
		ready := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Message).To(ContainSubstring("is not allowed"))
	}, wait, tick).Should(Succeed())
	g.Expect(apierrors.IsNotFound(up.Get(ctx, client.ObjectKey{Namespace: clusterNS, Name: "untouched-app"}, &fleet.BundleDeployment{}))).To(BeTrue())
	// The manager's runnables have started by now; the webhook receiver is
	// not among them.
	if conn, err := net.DialTimeout("tcp", webhookAddr, 5*time.Second); err == nil {
		_ = conn.Close()
		t.Fatalf("something serves git webhooks on %s with GitOps off", webhookAddr)
	}
	// Its metrics report the Bundle, and no GitRepo.
	g.Eventually(func(g Gomega) {
		body, err := scrape(metricsAddr)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(series(body, "fleet_bundle_desired_ready", map[string]string{"name": "applied", "namespace": ns})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_gitrepo_desired_ready_clusters", map[string]string{"name": gr.Name, "namespace": ns})).To(BeEmpty())
	}, wait, tick).Should(Succeed())

	// The GitRepo stays exactly as it was created, and its Bundles are
	// those it had.
	g.Consistently(func(g Gomega) {
		got := &fleet.GitRepo{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(gr), got)).To(Succeed())
		g.Expect(got.ResourceVersion).To(Equal(created), "the GitRepo was written: finalizers %v status %+v", got.Finalizers, got.Status)
		g.Expect(got.Finalizers).To(BeEmpty())
		g.Expect(got.Status.Commit).To(BeEmpty())
		bundles := &fleet.BundleList{}
		g.Expect(up.List(ctx, bundles, client.InNamespace(ns), client.MatchingLabels{fleet.RepoLabel: gr.Name})).To(Succeed())
		g.Expect(bundles.Items).To(HaveLen(1))
		g.Expect(bundles.Items[0].Name).To(Equal("untouched-app"))
		g.Expect(bundles.Items[0].Spec.Resources[0].Content).To(Equal(configMap("app", "v0")))
	}, 5*time.Second, tick).Should(Succeed())

	// Nothing of the manager (controllers, metrics) watches GitRepos: the
	// API server counts Bundle watches but none of GitRepos. (Watches of
	// managers of earlier tests may take a moment to close.)
	g.Eventually(func(g Gomega) {
		body, err := upstream.Clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		watches := func(resource string) float64 {
			var n float64
			for _, v := range series(string(body), "apiserver_longrunning_requests", map[string]string{"resource": resource, "verb": "WATCH"}) {
				n += v
			}
			return n
		}
		g.Expect(watches("bundles")).To(BeNumerically(">", 0))
		g.Expect(watches("gitrepos")).To(BeZero())
	}, wait, tick).Should(Succeed())
}
