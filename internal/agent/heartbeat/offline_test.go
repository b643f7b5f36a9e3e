package heartbeat_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// upstream runs the manager, downstream the agent: separate API servers,
// booted once for the package.
var upstream, downstream *testenv.Cluster

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.ErrorLevel)))
	var err error
	if upstream, downstream, err = testenv.StartPair("heartbeat"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = downstream.Stop()
	_ = upstream.Stop()
	os.Exit(code)
}

// TestAgentIntervalLongerThanManagers: a manager whose agentCheckinInterval
// is 1s (Offline after 3s) and an agent installed with its own check-in
// interval of 5s, reporting through the manager's content API. The agent
// reports its interval on the Cluster (status.agent.checkinInterval), and
// the manager holds the cluster to it: over several of the agent's check-ins
// the Cluster never shows Offline, and no ClusterOffline event is recorded.
// Before the agent reported its interval, the manager took the cluster to
// be Offline 3s after every check-in, until the next one.
func TestAgentIntervalLongerThanManagers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ws = "fleet-default"
	mgr, err := manager.New(ctx, upstream.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		AgentCheckinInterval: time.Second, Workers: 4,
		// The bootstrap also creates the system namespaces registration uses.
		BootstrapNamespace: "fleet-local",
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	if err := upstream.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}}); err != nil {
		t.Fatal(err)
	}
	// RegisterAgent runs the real agent (its heartbeat included) with a
	// 5 s check-in interval.
	cluster, _, err := fleettest.RegisterAgent(ctx, upstream, downstream, fleettest.Bootstrap{
		Workspace: ws, TokenName: "interval-token", Labels: map[string]string{"env": "interval"},
	})
	if err != nil {
		t.Fatal(err)
	}

	// Several of the agent's check-ins, each interval longer than the
	// manager's threshold of 3s.
	fleettest.ExpectOnlineCheckIns(ctx, t, upstream, fleettest.CheckIns{
		Workspace: ws, Cluster: cluster.Name, Interval: 5 * time.Second, Count: 4,
	})
}
