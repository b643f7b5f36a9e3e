// Package e2e runs the whole system on real parts: a manager cluster and a
// separate downstream cluster (each a real kube-apiserver + etcd), the manager
// controllers, an agent that registers with a token, and the `fleet` CLI.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

var upstream, downstream *testenv.Cluster

func TestMain(m *testing.M) {
	var err error
	if upstream, downstream, err = testenv.StartPair("e2e"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = downstream.Stop()
	_ = upstream.Stop()
	os.Exit(code)
}

// runFleet runs the fleet CLI in-process against the manager cluster.
func runFleet(args ...string) (string, error) {
	return fleettest.RunFleet(upstream.Kubeconfig, args...)
}

// TestVerticalSlice: token → agent registers → fleet apply → the agent
// deploys to the separate downstream cluster → status flows back up.
func TestVerticalSlice(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up, down := upstream.Client, downstream.Client
	const ws = "fleet-default"

	mgr, err := manager.New(ctx, upstream.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		AgentCheckinInterval: 5 * time.Second,
		BootstrapNamespace:   "fleet-local",
	})
	g.Expect(err).NotTo(HaveOccurred())
	stopManager(t, func() error { return mgr.Start(ctx) }, cancel)

	// 1. A workspace for the token and the cluster.
	g.Expect(up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}})).To(Succeed())
	// 2. The token's values are installed downstream the way the fleet-agent
	// chart does it (the chart itself is tested in internal/install), with
	// labels given at registration time.
	// 3. The agent registers: a Cluster with the labels appears, with its
	// own namespace, and the agent forgets the token.
	cluster, agentDone, err := fleettest.RegisterAgent(ctx, upstream, downstream, fleettest.Bootstrap{
		Workspace: ws, TokenName: "e2e-token", Labels: map[string]string{"env": "dev"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool {
		err := down.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemNamespace, Name: "fleet-agent-bootstrap"}, &corev1.Secret{})
		return apierrors.IsNotFound(err)
	}, 60*time.Second, 250*time.Millisecond).Should(BeTrue(), "bootstrap secret is deleted after registration")

	// The agent got its credential from the manager's content API, and
	// nobody else can get it there (see credentialHandover).
	t.Run("credential hand-over", func(t *testing.T) { credentialHandover(t, ctx, ws, cluster) })
	// Its check-ins go through the content API too, and it has no grant
	// in the workspace (see checkIns).
	t.Run("check-ins", func(t *testing.T) { checkIns(t, ctx, ws, cluster) })

	// 4. A user applies a bundle with the CLI, targeted at env=dev.
	dir := t.TempDir()
	write := func(name, content string) {
		g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)).To(Succeed())
	}
	write("app/fleet.yaml", "defaultNamespace: e2e-app\n")
	write("app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\ndata:\n  message: hello\n")
	write("targets.yaml", "targets:\n- clusterSelector:\n    matchLabels:\n      env: dev\n")
	out, err := runFleet("-n", ws, "apply", "--targets-file", filepath.Join(dir, "targets.yaml"), "e2e", filepath.Join(dir, "app"))
	g.Expect(err).NotTo(HaveOccurred(), out)

	// 5. The agent deploys it to the downstream cluster...
	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(down.Get(ctx, client.ObjectKey{Namespace: "e2e-app", Name: "greeting"}, cm)).To(Succeed())
		g.Expect(cm.Data["message"]).To(Equal("hello"))
	}, 120*time.Second, 500*time.Millisecond).Should(Succeed())
	// ...and nothing was written into the manager cluster's namespace of
	// that name: the manager does not deploy, the agent does, downstream.
	g.Expect(apierrors.IsNotFound(up.Get(ctx, client.ObjectKey{Namespace: "e2e-app", Name: "greeting"}, &corev1.ConfigMap{}))).To(BeTrue())

	// 6. Status flows back: BundleDeployment, Bundle and Cluster are Ready.
	bundles := &fleet.BundleList{}
	g.Eventually(func(g Gomega) {
		g.Expect(up.List(ctx, bundles, client.InNamespace(ws))).To(Succeed())
		g.Expect(bundles.Items).To(HaveLen(1))
		b := bundles.Items[0]
		g.Expect(b.Status.Display.ReadyClusters).To(Equal("1/1"))
		bd := &fleet.BundleDeployment{}
		g.Expect(up.Get(ctx, client.ObjectKey{Namespace: cluster.Status.Namespace, Name: b.Name}, bd)).To(Succeed())
		g.Expect(bd.Status.Ready).To(BeTrue())
		g.Expect(bd.Status.AppliedDeploymentID).To(Equal(bd.Spec.DeploymentID))
		c := &fleet.Cluster{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(&cluster), c)).To(Succeed())
		g.Expect(c.Status.Display.ReadyBundles).To(Equal("1/1"))
	}, 120*time.Second, 500*time.Millisecond).Should(Succeed())

	// 7. A change is rolled out: the downstream object follows.
	write("app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\ndata:\n  message: hello again\n")
	out, err = runFleet("-n", ws, "apply", "--targets-file", filepath.Join(dir, "targets.yaml"), "e2e", filepath.Join(dir, "app"))
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(down.Get(ctx, client.ObjectKey{Namespace: "e2e-app", Name: "greeting"}, cm)).To(Succeed())
		g.Expect(cm.Data["message"]).To(Equal("hello again"))
	}, 120*time.Second, 500*time.Millisecond).Should(Succeed())

	// 8. The agent read that manifest through the content API, with
	// nothing but its namespaced Role (see contentAPIAccess).
	t.Run("content API access", func(t *testing.T) { contentAPIAccess(t, ctx, cluster) })

	// 9. A HelmOp deploys a chart from a chart repository that only the
	// manager can reach, and a newer release in its range follows.
	t.Run("HelmOp", func(t *testing.T) { helmOpDeploys(t, ctx, ws) })

	cancel()
	select {
	case <-agentDone:
	case <-time.After(30 * time.Second):
		t.Error("agent did not stop after its context was cancelled")
	}
}
