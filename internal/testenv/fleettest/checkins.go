package fleettest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/transitions"
)

// CheckIns configure ExpectOnlineCheckIns.
type CheckIns struct {
	// Workspace is the namespace of the Cluster on the manager cluster.
	Workspace string
	// Cluster is the name of the Cluster to follow. Empty follows whichever
	// Cluster of Workspace has checked in, skipping its versions from before
	// its first check-in (an agent reports its interval with it).
	Cluster string
	// Interval is the check-in interval the agent reports; every version
	// followed must carry it in status.agent.checkinInterval.
	Interval time.Duration
	// Count is how many check-ins to follow after the first one seen.
	Count int
	// Timeout bounds the whole watch (default 2 minutes).
	Timeout time.Duration
}

// ExpectOnlineCheckIns watches the Clusters of c.Workspace on up until the
// agent has checked in c.Count more times (that many more distinct
// status.agent.lastSeen values), and fails the test if any version of the
// Cluster reports another checkin interval than c.Interval, an Offline
// condition other than WaitCheckIn, or state Offline, or if a ClusterOffline
// event was recorded for it. It is how real and simulated agents whose
// interval is longer than the manager's prove the manager holds the cluster
// to the agent's interval: each version is checked as the API server writes
// it, so a flap between two check-ins cannot be missed by polling.
func ExpectOnlineCheckIns(ctx context.Context, t testing.TB, up *testenv.Cluster, c CheckIns) {
	t.Helper()
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Minute
	}
	wc, err := client.NewWithWatch(up.Config, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &fleet.ClusterList{}, client.InNamespace(c.Workspace))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	seen := map[time.Time]bool{}
	name := c.Cluster
	var lastSeen time.Time
	timeout := time.After(c.Timeout)
	for len(seen) <= c.Count {
		var ev watch.Event
		var open bool
		select {
		case ev, open = <-w.ResultChan():
			if !open {
				t.Fatal("the API server closed the watch of Clusters")
			}
		case <-timeout:
			t.Fatalf("the agent checked in %d distinct times in %s (last %s), want %d", len(seen), c.Timeout, lastSeen, c.Count+1)
		}
		cl, ok := ev.Object.(*fleet.Cluster)
		if !ok || (c.Cluster != "" && cl.Name != c.Cluster) || (c.Cluster == "" && cl.Status.Agent.LastSeen.IsZero()) {
			continue
		}
		name = cl.Name
		if got := cl.Status.Agent.CheckinInterval; got == nil || got.Duration != c.Interval {
			t.Fatalf("status.agent.checkinInterval = %v, want %s", got, c.Interval)
		}
		// WaitCheckIn, written before the first check-in, is no Offline.
		if off := meta.FindStatusCondition(cl.Status.Conditions, fleet.ConditionOffline); off != nil && off.Status == metav1.ConditionTrue && off.Reason != fleet.ClusterWaitCheckIn {
			t.Fatalf("the Cluster went Offline %s after its last check-in at %s: %s (%s)", off.LastTransitionTime.Sub(cl.Status.Agent.LastSeen.Time), cl.Status.Agent.LastSeen, off.Reason, off.Message)
		}
		if cl.Status.Display.State == "Offline" {
			t.Fatalf("the Cluster shows state Offline (last check-in %s)", cl.Status.Agent.LastSeen)
		}
		lastSeen = cl.Status.Agent.LastSeen.Time
		seen[lastSeen] = true
	}

	events := &corev1.EventList{}
	if err := up.Client.List(ctx, events, client.InNamespace(c.Workspace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == name && e.Reason == transitions.ReasonClusterOffline {
			t.Errorf("event %s: %s", e.Reason, e.Message)
		}
	}
}
