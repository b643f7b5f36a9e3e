package schedule_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/schedule"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestInvalidClusterGroupFreezesFlags: the ClusterGroup a Schedule targets
// gets a selector that cannot be evaluated. Its clusters, listed in
// status.matchingClusters, stay scheduled and follow the window (rather
// than losing scheduled, which would deploy outside the windows), the
// Schedule is Ready=False naming the group, with a Warning Event, and it
// acts again once the group is fixed.
func TestInvalidClusterGroupFreezesFlags(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "badgroup")
	createCluster(t, ns, "a", map[string]string{"env": "prod"})
	createCluster(t, ns, "b", map[string]string{"env": "prod"})
	g := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"},
		Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	createSchedule(t, ns, "noon", "0 0 12 * * *", time.Hour, "UTC", []fleet.ScheduleTarget{{Name: "prod", ClusterGroup: "prod"}})
	expectFlags(t, ns, "a", active)
	expectFlags(t, ns, "b", active)
	expectStatus(t, ns, "noon", matching("a", "b"))

	update(t, g, func() {
		g.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn}}
	})
	expectStatus(t, ns, "noon", func(st fleet.ScheduleStatus) error {
		c := schedule.FindCondition(st.Conditions, fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != schedule.ReasonInvalidClusterGroup ||
			!strings.Contains(c.Message, "ClusterGroup "+ns+"/prod") || !strings.Contains(c.Message, "values set can't be empty") {
			return fmt.Errorf("Ready %+v", c)
		}
		return matching("a", "b")(st)
	})
	fleettest.Eventually(t, timeout, func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "noon" && e.Type == "Warning" && e.Reason == schedule.ReasonInvalidClusterGroup {
				return nil
			}
		}
		return fmt.Errorf("no Warning %s event", schedule.ReasonInvalidClusterGroup)
	})
	// The status write follows the cluster writes of the same reconcile,
	// and later reconciles (a cluster change) keep them too.
	b := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}}
	update(t, b, func() { b.Labels["touched"] = "yes" })
	fleettest.Consistently(t, 3*time.Second, func() error {
		for _, n := range []string{"a", "b"} {
			if got, err := flagsOf(ns, n); err != nil || got != active {
				return fmt.Errorf("cluster %s: %+v %v, want %+v", n, got, err, active)
			}
		}
		return nil
	})

	update(t, g, func() { g.Spec.Selector.MatchExpressions = nil })
	expectStatus(t, ns, "noon", func(st fleet.ScheduleStatus) error {
		if c := schedule.FindCondition(st.Conditions, fleet.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	expectFlags(t, ns, "a", active)
}

// TestInvalidClusterGroupLeavesListedClustersToWindow: a Schedule
// targets a ClusterGroup (cluster a) and, by name, cluster c outside it.
// Once the group's selector cannot be evaluated, its window still rules
// a and c, both in status.matchingClusters: moved to a window that is
// closed now, they turn inactive rather than staying active (which would
// let their Bundles deploy outside the window). Cluster b, which joins
// the group's labels only after the group broke, was never listed: its
// flags are left as they are.
func TestInvalidClusterGroupLeavesListedClustersToWindow(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "badgroup-listed")
	createCluster(t, ns, "a", map[string]string{"env": "prod"})
	createCluster(t, ns, "c", map[string]string{"env": "dev"})
	g := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"},
		Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	s := createSchedule(t, ns, "noon", "0 0 12 * * *", time.Hour, "UTC",
		[]fleet.ScheduleTarget{{Name: "prod", ClusterGroup: "prod"}, {Name: "c", ClusterName: "c"}})
	expectFlags(t, ns, "a", active)
	expectFlags(t, ns, "c", active)
	expectStatus(t, ns, "noon", matching("a", "c"))

	update(t, g, func() {
		g.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn}}
	})
	invalid := func(st fleet.ScheduleStatus) error {
		c := schedule.FindCondition(st.Conditions, fleet.ConditionReady)
		if c == nil || c.Reason != schedule.ReasonInvalidClusterGroup {
			return fmt.Errorf("Ready %+v", c)
		}
		if !strings.Contains(c.Message, "depends on an invalid ClusterGroup (ClusterGroup "+ns+"/prod has a selector") {
			return fmt.Errorf("message %q", c.Message)
		}
		return nil
	}
	expectStatus(t, ns, "noon", invalid)
	createCluster(t, ns, "b", map[string]string{"env": "prod"})
	setFlags(t, ns, "b", active)
	// 03:00-04:00 UTC: closed at the suite's clock (Saturday noon).
	update(t, s, func() { s.Spec.Schedule = "0 0 3 * * *" })
	expectFlags(t, ns, "c", inactive)
	expectFlags(t, ns, "a", inactive)
	expectStatus(t, ns, "noon", func(st fleet.ScheduleStatus) error {
		if err := invalid(st); err != nil {
			return err
		}
		if st.Active {
			return fmt.Errorf("status.active true with the window closed")
		}
		return matching("a", "c")(st)
	})
	fleettest.Consistently(t, 3*time.Second, func() error {
		for n, want := range map[string]schedule.Flags{"a": inactive, "b": active, "c": inactive} {
			if got, err := flagsOf(ns, n); err != nil || got != want {
				return fmt.Errorf("cluster %s: %+v %v, want %+v", n, got, err, want)
			}
		}
		return nil
	})
}
