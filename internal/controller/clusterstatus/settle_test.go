package clusterstatus

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func TestHeartbeatOnly(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const threshold = 45 * time.Minute
	base := func() *fleet.Cluster {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws", Generation: 1, Labels: map[string]string{"env": "dev"}}}
		c.Status.Namespace = "cluster-ns"
		c.Status.Agent.LastSeen = metav1.NewTime(now.Add(-time.Minute))
		c.Status.Display.ReadyNodes = "1/1"
		return c
	}
	cases := []struct {
		name   string
		old    func(*fleet.Cluster)
		change func(*fleet.Cluster)
		want   bool
	}{
		{name: "a heartbeat of an online cluster", change: func(c *fleet.Cluster) {
			c.Status.Agent.LastSeen = metav1.NewTime(now)
			c.Status.Display.ReadyNodes, c.Status.Display.SampleNode = "2/2", "n1"
		}, want: true},
		{name: "the first check-in", old: func(c *fleet.Cluster) { c.Status.Agent.LastSeen = metav1.Time{} },
			change: func(c *fleet.Cluster) { c.Status.Agent.LastSeen = metav1.NewTime(now) }},
		{name: "back from offline", old: func(c *fleet.Cluster) { c.Status.Agent.LastSeen = metav1.NewTime(now.Add(-time.Hour)) },
			change: func(c *fleet.Cluster) { c.Status.Agent.LastSeen = metav1.NewTime(now) }},
		{name: "a heartbeat with the same interval", old: func(c *fleet.Cluster) { c.Status.Agent.CheckinInterval = &metav1.Duration{Duration: time.Minute} },
			change: func(c *fleet.Cluster) { c.Status.Agent.LastSeen = metav1.NewTime(now) }, want: true},
		// The cluster now goes offline at another time: the reconcile
		// schedules it.
		{name: "a heartbeat with another interval", old: func(c *fleet.Cluster) { c.Status.Agent.CheckinInterval = &metav1.Duration{Duration: time.Hour} },
			change: func(c *fleet.Cluster) {
				c.Status.Agent.LastSeen = metav1.NewTime(now)
				c.Status.Agent.CheckinInterval = &metav1.Duration{Duration: time.Minute}
			}},
		{name: "the first heartbeat with an interval", change: func(c *fleet.Cluster) {
			c.Status.Agent.LastSeen = metav1.NewTime(now)
			c.Status.Agent.CheckinInterval = &metav1.Duration{Duration: time.Minute}
		}},
		{name: "a label", change: func(c *fleet.Cluster) { c.Labels["env"] = "prod" }},
		{name: "the spec", change: func(c *fleet.Cluster) { c.Generation++; c.Spec.Paused = true }},
		{name: "deletion", change: func(c *fleet.Cluster) { c.DeletionTimestamp = &metav1.Time{Time: now} }},
		{name: "status written by others", change: func(c *fleet.Cluster) { c.Status.Namespace = "other" }},
		{name: "a heartbeat with a condition change", change: func(c *fleet.Cluster) {
			c.Status.Agent.LastSeen = metav1.NewTime(now)
			c.Status.Conditions = []metav1.Condition{{Type: fleet.ConditionProcessed, Status: metav1.ConditionTrue}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			if tc.old != nil {
				tc.old(o)
			}
			n := o.DeepCopy()
			tc.change(n)
			if got := HeartbeatOnly(o, n, now, threshold); got != tc.want {
				t.Fatalf("HeartbeatOnly = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHoldUntil(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const settle = 30 * time.Second
	online := Liveness{NextCheck: time.Hour}
	waiting := OwnedStatus{Summary: fleet.BundleSummary{WaitApplied: 1, DesiredReady: 1}}
	ready := OwnedStatus{Summary: fleet.BundleSummary{Ready: 1, DesiredReady: 1}}
	created := func(ago time.Duration) *fleet.Cluster {
		return &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-ago))}}
	}
	wasOffline := created(time.Hour)
	wasOffline.Status.Conditions = []metav1.Condition{{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue}}
	cases := []struct {
		name    string
		c       *fleet.Cluster
		owned   OwnedStatus
		live    Liveness
		waiting time.Time
		want    time.Time
	}{
		{name: "new cluster, agent not checked in yet", c: created(2 * time.Second), live: Liveness{Offline: true, NeverSeen: true},
			want: now.Add(28 * time.Second)},
		{name: "old cluster never checked in: written", c: created(time.Minute), live: Liveness{Offline: true, NeverSeen: true},
			want: now.Add(-30 * time.Second)},
		{name: "rollout: waiting for the agent", c: created(time.Hour), owned: waiting, live: online, waiting: now.Add(-3 * time.Second),
			want: now.Add(27 * time.Second)},
		{name: "rollout: waited long enough", c: created(time.Hour), owned: waiting, live: online, waiting: now.Add(-time.Minute),
			want: now.Add(-30 * time.Second)},
		{name: "all ready: written", c: created(time.Hour), owned: ready, live: online, waiting: time.Time{}},
		{name: "offline cluster: written", c: created(time.Hour), owned: waiting, live: Liveness{Offline: true}, waiting: now},
		{name: "back online while waiting: written", c: wasOffline, owned: waiting, live: online, waiting: now},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := HoldUntil(tc.c, tc.owned, tc.live, tc.waiting, settle); !got.Equal(tc.want) {
				t.Fatalf("HoldUntil = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWaitsForAgent(t *testing.T) {
	waiting := OwnedStatus{Summary: fleet.BundleSummary{WaitApplied: 2, DesiredReady: 3}}
	if !WaitsForAgent(waiting, Liveness{NextCheck: time.Minute}) {
		t.Error("an online cluster with WaitApplied deployments waits for its agent")
	}
	if WaitsForAgent(waiting, Liveness{Offline: true}) {
		t.Error("an offline cluster does not wait for its agent")
	}
	if WaitsForAgent(OwnedStatus{Summary: fleet.BundleSummary{NotReady: 1, DesiredReady: 1}}, Liveness{NextCheck: time.Minute}) {
		t.Error("NotReady is not waiting for the agent")
	}
}

func TestCountsOnly(t *testing.T) {
	cond := func(typ string, s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason}
	}
	stored := &fleet.Cluster{}
	stored.Status.Display.State = "Ready"
	stored.Status.Conditions = []metav1.Condition{
		cond(fleet.ConditionReady, metav1.ConditionTrue, "Ready"),
		cond(fleet.ConditionOffline, metav1.ConditionFalse, "CheckedIn"),
	}
	owned := func(mut func(*OwnedStatus)) OwnedStatus {
		o := OwnedStatus{
			State:        "Ready",
			ReadyBundles: "3/3",
			Summary:      fleet.BundleSummary{Ready: 3, DesiredReady: 3},
			Ready:        cond(fleet.ConditionReady, metav1.ConditionTrue, "Ready"),
			Offline:      cond(fleet.ConditionOffline, metav1.ConditionFalse, "CheckedIn"),
		}
		if mut != nil {
			mut(&o)
		}
		return o
	}
	for _, tc := range []struct {
		name  string
		c     *fleet.Cluster
		owned OwnedStatus
		want  bool
	}{
		{"one more ready bundle", stored, owned(nil), true},
		{"message only", stored, owned(func(o *OwnedStatus) { o.Ready.Message = "x" }), true},
		{"turns not ready", stored, owned(func(o *OwnedStatus) {
			o.Ready = cond(fleet.ConditionReady, metav1.ConditionFalse, "NotReady")
			o.State = "NotReady"
		}), false},
		{"other reason", stored, owned(func(o *OwnedStatus) { o.Ready.Reason = "Other" }), false},
		{"goes offline", stored, owned(func(o *OwnedStatus) { o.Offline = cond(fleet.ConditionOffline, metav1.ConditionTrue, "NoCheckIn") }), false},
		{"state changes", stored, owned(func(o *OwnedStatus) { o.State = "Modified" }), false},
		{"never written", &fleet.Cluster{}, owned(nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CountsOnly(tc.c, tc.owned); got != tc.want {
				t.Fatalf("CountsOnly = %v, want %v", got, tc.want)
			}
		})
	}
}
