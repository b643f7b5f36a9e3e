package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetgo/fleet/internal/contentapi/serve"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// startIsolated gives a test its own downstream cluster, manager and
// workspace (<name>-workspace, whose agent registers with token
// <name>-token and label env=<name>), so that the agent of
// TestGitRepoToDownstream (whose stored credential names another Cluster)
// does not stand in the way. Everything stops with ctx and the test.
func startIsolated(t *testing.T, ctx context.Context, name string) (down *testenv.Cluster, ws string) {
	t.Helper()
	ws = name + "-workspace"
	down, err := testenv.Start(testenv.Options{Name: "gitops-" + name + "-downstream", WithoutCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = down.Stop() })
	mgr, err := manager.New(ctx, upstream.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		AgentCheckinInterval: 5 * time.Second, Workers: 4,
		BootstrapNamespace: "fleet-local",
		// As TestGitRepoToDownstream: no content API (and no APIService).
		ContentAPI: serve.Options{Addr: "0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	if err := upstream.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fleettest.RegisterAgent(ctx, upstream, down, fleettest.Bootstrap{
		Workspace: ws, TokenName: name + "-token", Labels: map[string]string{"env": name},
	}); err != nil {
		t.Fatal(err)
	}
	return down, ws
}
