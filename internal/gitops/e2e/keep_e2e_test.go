package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// TestKeepResourcesSetWhileRepoUnreachable: keepResources set on a GitRepo
// whose repository cannot be reached (so no sync carries it into the
// Bundles), and the GitRepo deleted at once. The deployment downstream must
// survive: the agent removes only the release history, and the GitRepo goes
// away. It has its own downstream cluster and workspace, so that the agent
// of TestGitRepoToDownstream (whose stored credential names another
// Cluster) does not stand in the way.
func TestKeepResourcesSetWhileRepoUnreachable(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const wait, poll = 120 * time.Second, 500 * time.Millisecond
	down, ws := startIsolated(t, ctx, "keep")
	up := upstream.Client

	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "keep")
	repo.Commit("master", map[string]string{
		"app/fleet.yaml": "defaultNamespace: kept\n",
		"app/cm.yaml":    configMap("kept", "v1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "keep"},
		Spec: fleet.GitRepoSpec{
			Repo: srv.URLFor(repo), Paths: []string{"app"},
			PollingInterval: &metav1.Duration{Duration: time.Second},
			Targets:         []fleet.GitTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "keep"}}}},
		},
	}
	g.Expect(up.Create(ctx, gr)).To(Succeed())
	kept := func(g Gomega) string {
		cm := &corev1.ConfigMap{}
		g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: "kept", Name: "kept"}, cm)).To(Succeed())
		return cm.Data["value"]
	}
	g.Eventually(kept, wait, poll).Should(Equal("v1"))

	// The repository becomes unreachable: from now on no sync can carry
	// keepResources into the Bundles.
	srv.Fail.Store(true)
	g.Eventually(func(g Gomega) {
		r := &fleet.GitRepo{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(gr), r)).To(Succeed())
		c := meta.FindStatusCondition(r.Status.Conditions, fleet.ConditionGitPolling)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	}, wait, poll).Should(Succeed())

	// keepResources, then delete at once.
	g.Eventually(func() error {
		r := &fleet.GitRepo{}
		if err := up.Get(ctx, client.ObjectKeyFromObject(gr), r); err != nil {
			return err
		}
		r.Spec.KeepResources = true
		return up.Update(ctx, r)
	}, wait, poll).Should(Succeed())
	g.Expect(up.Delete(ctx, gr)).To(Succeed())

	// The GitRepo and its Bundles go, and the agent handles the deletion of
	// the deployment: the release's history (Helm's storage Secrets) is
	// removed downstream.
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(up.Get(ctx, client.ObjectKeyFromObject(gr), &fleet.GitRepo{}))).To(BeTrue(), "GitRepo still there")
		bundles := &fleet.BundleList{}
		g.Expect(up.List(ctx, bundles, client.InNamespace(ws), client.MatchingLabels{fleet.RepoLabel: gr.Name})).To(Succeed())
		g.Expect(bundles.Items).To(BeEmpty())
		releases := &corev1.SecretList{}
		g.Expect(down.Client.List(ctx, releases, client.InNamespace("kept"), client.MatchingLabels{"owner": "helm"})).To(Succeed())
		g.Expect(releases.Items).To(BeEmpty(), "release history still stored")
	}, wait, poll).Should(Succeed())
	// ... and the deployed object is still there.
	g.Expect(kept(g)).To(Equal("v1"))
}
