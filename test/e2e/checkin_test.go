package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/heartbeat"
	"github.com/fleetgo/fleet/internal/contentapi"
)

// checkIns checks, through the API server's aggregation layer, that the
// agent of cluster reports its check-ins through the manager's content
// API: its registration asked for it, its credential has no grant in the
// workspace namespace (so it cannot patch the Cluster itself), and yet the
// Cluster shows its check-ins; a check-in is taken only for the caller's
// own Cluster.
func checkIns(t *testing.T, ctx context.Context, ws string, cluster fleet.Cluster) {
	g := NewWithT(t)
	up := upstream.Client

	reg := registrationOf(t, ctx, ws, cluster)
	g.Expect(reg.Annotations).To(HaveKeyWithValue(contentapi.ClusterStatusAnnotation, contentapi.ClusterStatusContentAPI))

	roles := &rbacv1.RoleList{}
	g.Expect(up.List(ctx, roles, client.InNamespace(ws), client.MatchingLabels{fleet.ClusterLabel: cluster.Name})).To(Succeed())
	g.Expect(roles.Items).To(BeEmpty(), "a Role for the cluster's credential in the workspace")
	bindings := &rbacv1.RoleBindingList{}
	g.Expect(up.List(ctx, bindings, client.InNamespace(ws), client.MatchingLabels{fleet.ClusterLabel: cluster.Name})).To(Succeed())
	g.Expect(bindings.Items).To(BeEmpty(), "a RoleBinding for the cluster's credential in the workspace")

	g.Eventually(func(g Gomega) {
		c := &fleet.Cluster{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(&cluster), c)).To(Succeed())
		g.Expect(c.Status.Agent.LastSeen.IsZero()).To(BeFalse(), "no check-in yet")
		g.Expect(c.Status.Agent.Namespace).To(Equal(fleet.DefaultSystemNamespace))
	}, 60*time.Second, 250*time.Millisecond).Should(Succeed())

	agentCfg := agentConfig(t, ctx)
	content, err := contentapi.NewRESTClient(agentCfg, nil)
	g.Expect(err).NotTo(HaveOccurred())
	report := heartbeat.Status(nil, fleet.DefaultSystemNamespace, time.Now())
	report.Display.SampleNode = "e2e-probe"
	clusterNS := cluster.Status.Namespace

	t.Run("its own check-in is written on its Cluster", func(t *testing.T) {
		NewWithT(t).Expect(heartbeat.Put(ctx, content, ws, clusterNS, cluster.Name, report)).To(Succeed())
		c := &fleet.Cluster{}
		NewWithT(t).Expect(up.Get(ctx, client.ObjectKeyFromObject(&cluster), c)).To(Succeed())
		NewWithT(t).Expect(c.Status.Display.SampleNode).To(Equal("e2e-probe"))
	})
	t.Run("patching the Cluster itself: refused by RBAC (403)", func(t *testing.T) {
		agent, err := client.New(agentCfg, client.Options{Scheme: up.Scheme()})
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		patch, _ := report.MergePatch()
		err = agent.Status().Patch(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: cluster.Name}}, client.RawPatch(types.MergePatchType, patch))
		NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})
	t.Run("another Cluster's check-in from its own namespace: refused by the manager (403)", func(t *testing.T) {
		err := heartbeat.Put(ctx, content, ws, clusterNS, "some-other-cluster", report)
		NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		NewWithT(t).Expect(err.Error()).To(ContainSubstring("not the cluster namespace"))
	})
	t.Run("a check-in in another namespace: refused by RBAC (403)", func(t *testing.T) {
		err := heartbeat.Put(ctx, content, ws, ws, cluster.Name, report)
		NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})
	t.Run("anonymous: refused", func(t *testing.T) {
		anon, err := contentapi.NewRESTClient(rest.AnonymousClientConfig(agentCfg), nil)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		err = heartbeat.Put(ctx, anon, ws, clusterNS, cluster.Name, report)
		NewWithT(t).Expect(apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})
}
