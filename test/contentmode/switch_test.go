// Package contentmode switches a running fleet's manager from the content
// API to RBAC-granted Content reads (chart contentAPI.enabled=false, or an
// API server that lost its aggregation layer) and checks that a cluster
// registered before the switch still gets its new manifests.
package contentmode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

var upstream, downstream *testenv.Cluster

func TestMain(m *testing.M) {
	var err error
	if upstream, downstream, err = testenv.StartPair("contentmode"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = downstream.Stop()
	_ = upstream.Stop()
	os.Exit(code)
}

func startManager(t *testing.T, ctx context.Context, contentAPIAddr string) context.CancelFunc {
	t.Helper()
	opts := manager.Options{MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		AgentCheckinInterval: 5 * time.Second, BootstrapNamespace: "fleet-local"}
	opts.ContentAPI.Addr = contentAPIAddr
	if contentAPIAddr != "0" {
		opts.ContentAPI.ExternalName = "127.0.0.1"
	}
	mctx, cancel := context.WithCancel(ctx)
	mgr, err := manager.New(mctx, upstream.Config, opts)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("manager did not stop")
		}
	}
}

func TestSwitchFromContentAPIToRBACKeepsRegisteredClustersDeploying(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up, down := upstream.Client, downstream.Client
	const ws = "fleet-default"

	// A fleet that runs the content API registers a cluster and deploys.
	stopFirst := startManager(t, ctx, "127.0.0.1:0")
	g.Expect(up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}})).To(Succeed())
	cluster, _, err := fleettest.RegisterAgent(ctx, upstream, downstream, fleettest.Bootstrap{
		Workspace: ws, TokenName: "switch-token", Labels: map[string]string{"env": "switch"},
	})
	g.Expect(err).NotTo(HaveOccurred())

	dir, targets := t.TempDir(), filepath.Join(t.TempDir(), "targets.yaml")
	g.Expect(os.WriteFile(targets, []byte("targets:\n- clusterSelector:\n    matchLabels:\n      env: switch\n"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte("defaultNamespace: switch-app\n"), 0o644)).To(Succeed())
	deploy := func(message string) {
		t.Helper()
		g.Expect(os.WriteFile(filepath.Join(dir, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\ndata:\n  message: "+message+"\n"), 0o644)).To(Succeed())
		out, err := fleettest.RunFleet(upstream.Kubeconfig, "-n", ws, "apply", "--targets-file", targets, "switch", dir)
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Eventually(func(g Gomega) {
			cm := &corev1.ConfigMap{}
			g.Expect(down.Get(ctx, client.ObjectKey{Namespace: "switch-app", Name: "greeting"}, cm)).To(Succeed())
			g.Expect(cm.Data["message"]).To(Equal(message))
		}, 120*time.Second, 500*time.Millisecond).Should(Succeed())
	}
	deploy("through the content API")

	// Its credential has no binding for direct Content reads.
	agentSAs := &corev1.ServiceAccountList{}
	g.Expect(up.List(ctx, agentSAs, client.InNamespace(cluster.Status.Namespace), client.HasLabels{fleet.CredentialOfRegistrationLabel})).To(Succeed())
	g.Expect(agentSAs.Items).To(HaveLen(1))
	binding := client.ObjectKey{Name: names.ContentBindingName(agentSAs.Items[0].Name)}
	g.Expect(apierrors.IsNotFound(up.Get(ctx, binding, &rbacv1.ClusterRoleBinding{}))).To(BeTrue())

	// The manager is restarted with the content API off.
	stopFirst()
	stopSecond := startManager(t, ctx, "0")
	defer stopSecond()
	g.Eventually(func() bool {
		return apierrors.IsNotFound(up.Get(ctx, client.ObjectKey{Name: contentapi.APIServiceName}, contentapi.APIService()))
	}, 60*time.Second, 250*time.Millisecond).Should(BeTrue(), "the content APIService is withdrawn")

	// The cluster registered before the switch gets the next manifest,
	// read directly through the binding the manager added.
	deploy("through RBAC")
	crb := &rbacv1.ClusterRoleBinding{}
	g.Expect(up.Get(ctx, binding, crb)).To(Succeed())
	g.Expect(crb.RoleRef.Name).To(Equal(names.ContentRoleName(cluster.Status.Namespace)))
	g.Expect(crb.Subjects).To(ConsistOf(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: agentSAs.Items[0].Name, Namespace: cluster.Status.Namespace}))
}
