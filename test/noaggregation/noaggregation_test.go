// Package noaggregation runs the vertical slice against a manager cluster
// whose API server has no aggregation layer: the manager, started with the
// chart's defaults (content API on), must notice, grant Contents through
// RBAC instead, remove a content APIService an earlier manager left behind,
// and the agent must still deploy.
package noaggregation

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

var upstream, downstream *testenv.Cluster

func TestMain(m *testing.M) {
	var err error
	if upstream, err = testenv.Start(testenv.Options{Name: "noagg-upstream", WithoutAggregationLayer: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if downstream, err = testenv.Start(testenv.Options{Name: "noagg-downstream", WithoutCRDs: true}); err != nil {
		_ = upstream.Stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = downstream.Stop()
	_ = upstream.Stop()
	os.Exit(code)
}

func TestWithoutAggregationLayerContentsAreGrantedThroughRBAC(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up, down := upstream.Client, downstream.Client
	const ws = "fleet-default"

	// The API server publishes its authentication ConfigMap, without a
	// request-header CA.
	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(up.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, cm)).To(Succeed())
		g.Expect(cm.Data).NotTo(HaveKey("requestheader-client-ca-file"))
	}, 60*time.Second, 250*time.Millisecond).Should(Succeed())

	// An earlier manager (with the content API on) left its APIService.
	stale := contentapi.APIService()
	stale.SetLabels(map[string]string{fleet.ManagedLabel: "true"})
	g.Expect(unstructured.SetNestedMap(stale.Object, map[string]any{
		"group": contentapi.Group, "version": contentapi.Version,
		"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
		"service": map[string]any{"namespace": fleet.DefaultSystemNamespace, "name": "fleet-content-api", "port": int64(443)},
	}, "spec")).To(Succeed())
	g.Expect(up.Create(ctx, stale)).To(Succeed())

	// The manager as the chart starts it: content API on.
	opts := manager.Options{MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		AgentCheckinInterval: 5 * time.Second, BootstrapNamespace: "fleet-local"}
	opts.ContentAPI.Addr = "127.0.0.1:0"
	opts.ContentAPI.ExternalName = "127.0.0.1"
	mgr, err := manager.New(ctx, upstream.Config, opts)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = mgr.Start(ctx) }()

	g.Eventually(func() bool {
		return apierrors.IsNotFound(up.Get(ctx, client.ObjectKey{Name: contentapi.APIServiceName}, contentapi.APIService()))
	}, 60*time.Second, 250*time.Millisecond).Should(BeTrue(), "the stale content APIService is deleted")

	g.Expect(up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}})).To(Succeed())
	cluster, agentDone, err := fleettest.RegisterAgent(ctx, upstream, downstream, fleettest.Bootstrap{
		Workspace: ws, TokenName: "noagg-token", Labels: map[string]string{"env": "noagg"},
	})
	g.Expect(err).NotTo(HaveOccurred())

	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte("defaultNamespace: noagg-app\n"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\ndata:\n  message: no aggregation\n"), 0o644)).To(Succeed())
	targets := filepath.Join(t.TempDir(), "targets.yaml")
	g.Expect(os.WriteFile(targets, []byte("targets:\n- clusterSelector:\n    matchLabels:\n      env: noagg\n"), 0o644)).To(Succeed())
	out, err := fleettest.RunFleet(upstream.Kubeconfig, "-n", ws, "apply", "--targets-file", targets, "noagg", dir)
	g.Expect(err).NotTo(HaveOccurred(), out)

	// The agent deploys it downstream and reports Ready.
	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(down.Get(ctx, client.ObjectKey{Namespace: "noagg-app", Name: "greeting"}, cm)).To(Succeed())
		g.Expect(cm.Data["message"]).To(Equal("no aggregation"))
	}, 120*time.Second, 500*time.Millisecond).Should(Succeed())
	bd := &fleet.BundleDeployment{}
	g.Eventually(func(g Gomega) {
		bds := &fleet.BundleDeploymentList{}
		g.Expect(up.List(ctx, bds, client.InNamespace(cluster.Status.Namespace))).To(Succeed())
		g.Expect(bds.Items).To(HaveLen(1))
		*bd = bds.Items[0]
		g.Expect(bd.Status.Ready).To(BeTrue())
		g.Expect(bd.Status.AppliedDeploymentID).To(Equal(bd.Spec.DeploymentID))
	}, 120*time.Second, 500*time.Millisecond).Should(Succeed())

	// It read the Content directly: its cluster's ClusterRole grants
	// exactly that Content, bound to the agent's ServiceAccount.
	role := &rbacv1.ClusterRole{}
	g.Expect(up.Get(ctx, client.ObjectKey{Name: bundle.ContentRoleName(cluster.Status.Namespace)}, role)).To(Succeed())
	g.Expect(bundle.GrantedContents(role)).To(ContainElement(manifest.ManifestIDOf(bd.Spec.DeploymentID)))
	bindings := &rbacv1.ClusterRoleBindingList{}
	g.Expect(up.List(ctx, bindings)).To(Succeed())
	g.Expect(slices.ContainsFunc(bindings.Items, func(b rbacv1.ClusterRoleBinding) bool {
		return b.RoleRef.Name == role.Name && len(b.Subjects) == 1 && b.Subjects[0].Kind == rbacv1.ServiceAccountKind
	})).To(BeTrue(), "a ClusterRoleBinding gives the agent its content role")
	// And no content APIService came back.
	g.Expect(apierrors.IsNotFound(up.Get(ctx, client.ObjectKey{Name: contentapi.APIServiceName}, contentapi.APIService()))).To(BeTrue())

	cancel()
	select {
	case <-agentDone:
	case <-time.After(30 * time.Second):
		t.Error("agent did not stop after its context was cancelled")
	}
}
