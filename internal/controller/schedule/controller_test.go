package schedule_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/schedule"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

func createCluster(t *testing.T, ns, name string, labels map[string]string) {
	t.Helper()
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	if err := env.Client.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// update applies change to a fresh copy of obj and writes it, again on
// a conflict (the controllers write the status and finalizers).
func update(t *testing.T, obj client.Object, change func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return env.Client.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func byLabel(k, v string) []fleet.ScheduleTarget {
	return []fleet.ScheduleTarget{{Name: k + "-" + v, ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}}}
}

func createSchedule(t *testing.T, ns, name, cron string, d time.Duration, loc string, targets []fleet.ScheduleTarget) *fleet.Schedule {
	t.Helper()
	s := &fleet.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: fleet.ScheduleSpec{
		Schedule: cron, Duration: metav1.Duration{Duration: d}, Location: loc, Targets: fleet.ScheduleTargets{Clusters: targets}}}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func flagsOf(ns, name string) (schedule.Flags, error) {
	c := &fleet.Cluster{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, c); err != nil {
		return schedule.Flags{}, err
	}
	return schedule.FlagsOf(c), nil
}

func expectFlags(t *testing.T, ns, name string, want schedule.Flags) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		got, err := flagsOf(ns, name)
		if err == nil && got != want {
			err = fmt.Errorf("cluster %s: %+v, want %+v", name, got, want)
		}
		return err
	})
}

// expectStatus waits until Schedule name's status passes check.
func expectStatus(t *testing.T, ns, name string, check func(fleet.ScheduleStatus) error) fleet.ScheduleStatus {
	t.Helper()
	s := &fleet.Schedule{}
	fleettest.Eventually(t, timeout, func() error {
		if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
			return err
		}
		return check(s.Status)
	})
	return s.Status
}

func matching(want ...string) func(fleet.ScheduleStatus) error {
	return func(st fleet.ScheduleStatus) error {
		if !reflect.DeepEqual(st.MatchingClusters, want) {
			return fmt.Errorf("matchingClusters %v, want %v", st.MatchingClusters, want)
		}
		return nil
	}
}

var (
	active   = schedule.Flags{Scheduled: true, Active: true}
	inactive = schedule.Flags{Scheduled: true}
	none     = schedule.Flags{}
)

// TestActiveWindowMarksMatchingClusters: inside a window, the clusters a
// Schedule targets are scheduled and active, the others untouched; the
// Schedule shows its window and clusters.
func TestActiveWindowMarksMatchingClusters(t *testing.T) {
	ns := newNamespace(t, "active")
	createCluster(t, ns, "dev", map[string]string{"env": "dev"})
	createCluster(t, ns, "prod", map[string]string{"env": "prod"})
	createSchedule(t, ns, "noon", "0 0 12 * * *", time.Hour, "UTC", byLabel("env", "dev"))

	expectFlags(t, ns, "dev", active)
	st := expectStatus(t, ns, "noon", matching("dev"))
	if !st.Active || !st.NextStartTime.Time.Equal(start.Add(24*time.Hour)) {
		t.Errorf("status active %v, nextStartTime %s; want true, %s", st.Active, st.NextStartTime.UTC(), start.Add(24*time.Hour))
	}
	if c := schedule.FindCondition(st.Conditions, fleet.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v", c)
	}
	if got, err := flagsOf(ns, "prod"); err != nil || got != none {
		t.Errorf("non-matching cluster: %+v %v", got, err)
	}
}

// TestLocation: the cron expression is read in spec.location: 14:00 in
// Berlin is noon UTC in June, inside the window.
func TestLocation(t *testing.T) {
	ns := newNamespace(t, "location")
	createCluster(t, ns, "berlin", map[string]string{"city": "berlin"})
	createCluster(t, ns, "utc", map[string]string{"city": "utc"})
	createSchedule(t, ns, "berlin", "0 0 14 * * *", time.Hour, "Europe/Berlin", byLabel("city", "berlin"))
	createSchedule(t, ns, "utc", "0 0 14 * * *", time.Hour, "UTC", byLabel("city", "utc"))

	expectFlags(t, ns, "berlin", active)
	expectFlags(t, ns, "utc", inactive)
	expectStatus(t, ns, "utc", func(st fleet.ScheduleStatus) error {
		if want := start.Add(2 * time.Hour); st.Active || !st.NextStartTime.Time.Equal(want) {
			return fmt.Errorf("active %v, nextStartTime %s, want false, %s", st.Active, st.NextStartTime.UTC(), want)
		}
		return nil
	})
}

// TestOutsideWindow: outside its windows a Schedule's clusters are
// scheduled but not active, so their deployments wait.
func TestOutsideWindow(t *testing.T) {
	ns := newNamespace(t, "outside")
	createCluster(t, ns, "dev", map[string]string{"env": "dev"})
	createSchedule(t, ns, "night", "0 0 3 * * *", time.Hour, "UTC", byLabel("env", "dev"))

	expectFlags(t, ns, "dev", inactive)
	expectStatus(t, ns, "night", func(st fleet.ScheduleStatus) error {
		if want := time.Date(2030, 6, 16, 3, 0, 0, 0, time.UTC); st.Active || !st.NextStartTime.Time.Equal(want) {
			return fmt.Errorf("active %v, nextStartTime %s, want false, %s", st.Active, st.NextStartTime.UTC(), want)
		}
		return nil
	})
}

// TestDeletingClearsFlags: deleting the Schedule clears the flags of its
// clusters before it goes.
func TestDeletingClearsFlags(t *testing.T) {
	ns := newNamespace(t, "delete")
	createCluster(t, ns, "dev", map[string]string{"env": "dev"})
	s := createSchedule(t, ns, "noon", "0 0 12 * * *", time.Hour, "UTC", byLabel("env", "dev"))
	expectFlags(t, ns, "dev", active)

	if err := env.Client.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	expectFlags(t, ns, "dev", none)
	fleettest.Eventually(t, timeout, func() error {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(s), &fleet.Schedule{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("schedule still there: %v", err)
	})
}

// TestClusterLeavingTargetsIsCleared: a cluster that no longer matches
// (its ClusterGroup's selector changed) loses its flags.
func TestClusterLeavingTargetsIsCleared(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "leave")
	createCluster(t, ns, "a", map[string]string{"team": "a"})
	createCluster(t, ns, "b", map[string]string{"team": "b"})
	g := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "grp"},
		Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	createSchedule(t, ns, "noon", "0 0 12 * * *", time.Hour, "UTC", []fleet.ScheduleTarget{{ClusterGroup: "grp"}})
	expectFlags(t, ns, "a", active)
	expectStatus(t, ns, "noon", matching("a"))

	update(t, g, func() { g.Spec.Selector.MatchLabels["team"] = "b" })
	expectFlags(t, ns, "a", none)
	expectFlags(t, ns, "b", active)
	expectStatus(t, ns, "noon", matching("b"))
}

// TestSeveralSchedulesAddUp: a cluster targeted by two Schedules is
// active while either has a window open; deleting the open one leaves it
// scheduled and inactive.
func TestSeveralSchedulesAddUp(t *testing.T) {
	ns := newNamespace(t, "several")
	createCluster(t, ns, "dev", map[string]string{"env": "dev"})
	createSchedule(t, ns, "night", "0 0 3 * * *", time.Hour, "UTC", byLabel("env", "dev"))
	noon := createSchedule(t, ns, "noon", "0 0 12 * * *", time.Hour, "UTC", byLabel("env", "dev"))
	expectFlags(t, ns, "dev", active)

	if err := env.Client.Delete(context.Background(), noon); err != nil {
		t.Fatal(err)
	}
	expectFlags(t, ns, "dev", inactive)
}

// TestInvalidScheduleChangesNoCluster: a bad cron expression gives
// Ready=False and a Warning Event, and no cluster changes: a new
// Schedule marks none, and a Schedule that was valid leaves its clusters'
// flags as they were.
func TestInvalidScheduleChangesNoCluster(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "invalid")
	createCluster(t, ns, "new", map[string]string{"env": "new"})
	createCluster(t, ns, "old", map[string]string{"env": "old"})
	createSchedule(t, ns, "bad", "every day", time.Hour, "UTC", byLabel("env", "new"))
	old := createSchedule(t, ns, "old", "0 0 12 * * *", time.Hour, "UTC", byLabel("env", "old"))
	expectFlags(t, ns, "old", active)

	update(t, old, func() { old.Spec.Schedule = "0 0 12 * *" })
	for name, cron := range map[string]string{"bad": "every day", "old": "0 0 12 * *"} {
		expectStatus(t, ns, name, func(st fleet.ScheduleStatus) error {
			c := schedule.FindCondition(st.Conditions, fleet.ConditionReady)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != schedule.ReasonInvalidSchedule ||
				!strings.Contains(c.Message, fmt.Sprintf("spec.schedule %q", cron)) {
				return fmt.Errorf("Ready %+v", c)
			}
			return nil
		})
		fleettest.Eventually(t, timeout, func() error {
			var evs eventsv1.EventList
			if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Regarding.Name == name && e.Type == "Warning" && e.Reason == schedule.ReasonInvalidSchedule && strings.Contains(e.Note, cron) {
					return nil
				}
			}
			return fmt.Errorf("no Warning %s event for %s", schedule.ReasonInvalidSchedule, name)
		})
	}
	// The status write follows the cluster writes of the same reconcile:
	// what the clusters show now is what the invalid Schedules left.
	for name, want := range map[string]schedule.Flags{"new": none, "old": active} {
		if got, err := flagsOf(ns, name); err != nil || got != want {
			t.Errorf("cluster %s: %+v %v, want %+v", name, got, err, want)
		}
	}
}

// TestWakesAtWindowBoundaries: with no other event, the controller wakes
// itself when a window opens and when it closes.
func TestWakesAtWindowBoundaries(t *testing.T) {
	ns := newNamespace(t, "wake")
	createCluster(t, ns, "dev", map[string]string{"env": "dev"})
	t0 := now().Add(10 * time.Second).Truncate(time.Second)
	cron := fmt.Sprintf("%d %d %d * * *", t0.Second(), t0.Minute(), t0.Hour())
	createSchedule(t, ns, "soon", cron, 3*time.Second, "UTC", byLabel("env", "dev"))

	expectStatus(t, ns, "soon", func(st fleet.ScheduleStatus) error {
		if !st.NextStartTime.Time.Equal(t0) {
			return fmt.Errorf("nextStartTime %s, want %s", st.NextStartTime.UTC(), t0)
		}
		return nil
	})
	expectFlags(t, ns, "dev", active)
	expectFlags(t, ns, "dev", inactive)
	expectStatus(t, ns, "soon", func(st fleet.ScheduleStatus) error {
		if want := t0.Add(24 * time.Hour); st.Active || !st.NextStartTime.Time.Equal(want) {
			return fmt.Errorf("active %v, nextStartTime %s, want false, %s", st.Active, st.NextStartTime.UTC(), want)
		}
		return nil
	})
}

// TestOtherStatusWritersKeepFlags: the Cluster status controller writes
// its part of the status beside the flags, and flags that another writer
// wipes (a full status update from a copy without them) are put back.
func TestOtherStatusWritersKeepFlags(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "writers")
	createCluster(t, ns, "dev", map[string]string{"env": "dev"})
	createSchedule(t, ns, "noon", "0 0 12 * * *", time.Hour, "UTC", byLabel("env", "dev"))
	expectFlags(t, ns, "dev", active)

	// A cluster namespace (the one the manager gives the Cluster, the only
	// one it trusts) makes the Cluster status controller write the Ready
	// condition and counts.
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dev"}}
	cns := names.ClusterNamespace(ns, "dev")
	updateStatus(t, c, func() { c.Status.Namespace = cns })
	fleettest.Eventually(t, timeout, func() error {
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dev"}, c); err != nil {
			return err
		}
		if meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionReady) == nil {
			return fmt.Errorf("no Ready condition from the Cluster status controller yet")
		}
		if got := schedule.FlagsOf(c); got != active {
			return fmt.Errorf("flags %+v beside the status controller's fields", got)
		}
		return nil
	})

	// A full status update from a copy without the flags: the API
	// server stores them cleared, and they come back beside what the
	// other writers wrote.
	updateStatus(t, c, func() { c.Status.Scheduled, c.Status.ActiveSchedule = false, false })
	if got := schedule.FlagsOf(c); got != none {
		t.Fatalf("the wipe stored %+v", got)
	}
	fleettest.Eventually(t, timeout, func() error {
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dev"}, c); err != nil {
			return err
		}
		if got := schedule.FlagsOf(c); got != active {
			return fmt.Errorf("flags %+v after the wipe", got)
		}
		if c.Status.Namespace != cns || meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionReady) == nil {
			return fmt.Errorf("the other writers' fields are gone: namespace %q, conditions %v", c.Status.Namespace, c.Status.Conditions)
		}
		return nil
	})
}

// updateStatus applies change to a fresh copy of obj and writes its
// status, again on a conflict.
func updateStatus(t *testing.T, obj client.Object, change func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return env.Client.Status().Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}
