package heartbeat_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/transitions"
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

	wc, err := client.NewWithWatch(upstream.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &fleet.ClusterList{}, client.InNamespace(ws))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// Every version of the Cluster from now until the agent has checked in
	// checkIns more times: several of its intervals, each longer than the
	// manager's threshold of 3s.
	const checkIns = 4
	seen := map[time.Time]bool{}
	var lastSeen time.Time
	timeout := time.After(2 * time.Minute)
	for len(seen) <= checkIns {
		var ev watch.Event
		var open bool
		select {
		case ev, open = <-w.ResultChan():
			if !open {
				t.Fatal("the API server closed the watch of Clusters")
			}
		case <-timeout:
			t.Fatalf("the agent checked in %d times in 2 minutes (last %s), want %d", len(seen)-1, lastSeen, checkIns+1)
		}
		c, ok := ev.Object.(*fleet.Cluster)
		if !ok || c.Name != cluster.Name {
			continue
		}
		if got := c.Status.Agent.CheckinInterval; got == nil || got.Duration != 5*time.Second {
			t.Fatalf("status.agent.checkinInterval = %v, want 5s", got)
		}
		// WaitCheckIn, written before the first check-in, is no Offline.
		if off := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionOffline); off != nil && off.Status == metav1.ConditionTrue && off.Reason != fleet.ClusterWaitCheckIn {
			t.Fatalf("the Cluster went Offline %s after its last check-in at %s: %s (%s)", off.LastTransitionTime.Sub(c.Status.Agent.LastSeen.Time), c.Status.Agent.LastSeen, off.Reason, off.Message)
		}
		if c.Status.Display.State == "Offline" {
			t.Fatalf("the Cluster shows state Offline (last check-in %s)", c.Status.Agent.LastSeen)
		}
		lastSeen = c.Status.Agent.LastSeen.Time
		seen[lastSeen] = true
	}

	events := &corev1.EventList{}
	if err := upstream.Client.List(ctx, events, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == cluster.Name && e.Reason == transitions.ReasonClusterOffline {
			t.Errorf("event %s: %s", e.Reason, e.Message)
		}
	}
}
