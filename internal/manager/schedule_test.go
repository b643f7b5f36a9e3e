package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi/serve"
	"github.com/fleetgo/fleet/internal/controller/schedule"
)

// TestSchedulesOnlyWhenEnabled: a manager without Schedules enabled
// leaves a Schedule's spec and status alone and, as Rancher Fleet with its
// flag off, leaves the Cluster flags as they are (held clusters stay
// held). A Schedule being deleted that carries the finalizer clears the
// flags of the clusters its status lists, except one another Schedule
// still lists, and is released. One with them enabled (what
// EXPERIMENTAL_SCHEDULES=true sets) marks the Cluster scheduled.
func TestSchedulesOnlyWhenEnabled(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "schedules-"}}
	if err := up.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	flags := client.RawPatch(types.MergePatchType, []byte(`{"status":{"scheduled":true,"activeSchedule":false}}`))
	clusters := map[string]*fleet.Cluster{}
	for _, name := range []string{"dev", "released", "shared"} {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name, Labels: map[string]string{"env": name}}}
		if err := up.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := up.Client.Status().Patch(ctx, c, flags); err != nil {
			t.Fatal(err)
		}
		clusters[name] = c
	}
	cluster := clusters["dev"]
	s := &fleet.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "hourly"}, Spec: fleet.ScheduleSpec{
		Schedule: "0 0 * * * *", Duration: metav1.Duration{Duration: 30 * time.Minute}, Location: "UTC",
		Targets: fleet.ScheduleTargets{Clusters: []fleet.ScheduleTarget{{ClusterName: "dev"}}}}}
	if err := up.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	// Schedules Rancher Fleet (or an enabled run) reconciled: "migrated"
	// is deleted while Schedules are off; "other" stays and still lists
	// "shared".
	migrated := reconciledSchedule(t, s, "migrated", "released", "shared")
	reconciledSchedule(t, s, "other", "shared")
	quiet := Options{MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0", ContentAPI: serve.Options{Addr: "0"}}

	t.Run("disabled", func(t *testing.T) {
		startManager(t, quiet)
		// Registration giving the Clusters their namespace shows the
		// manager is running.
		eventually(t, time.Minute, func() error { return expectFlagged(ctx, clusters, "dev", "released", "shared") })
		time.Sleep(2 * time.Second)
		if err := expectFlagged(ctx, clusters, "dev", "released", "shared"); err != nil {
			t.Errorf("no Schedule deleted: %v", err)
		}
		if err := up.Client.Delete(ctx, migrated); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() error {
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(migrated), migrated); !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleted Schedule still there (finalizers %v): %v", migrated.Finalizers, err)
			}
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(clusters["released"]), clusters["released"]); err != nil {
				return err
			}
			if f := schedule.FlagsOf(clusters["released"]); f != (schedule.Flags{}) {
				return fmt.Errorf("cluster of the deleted Schedule still flagged: %+v", f)
			}
			return nil
		})
		if err := expectFlagged(ctx, clusters, "dev", "shared"); err != nil {
			t.Errorf("after deleting a Schedule: %v", err)
		}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			t.Fatal(err)
		}
		if len(s.Finalizers) != 0 || len(s.Status.Conditions) != 0 {
			t.Errorf("disabled, yet finalizers %v, conditions %v", s.Finalizers, s.Status.Conditions)
		}
	})

	t.Run("enabled", func(t *testing.T) {
		opts := quiet
		opts.Schedules = true
		startManager(t, opts)
		eventually(t, time.Minute, func() error {
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
				return err
			}
			if c := schedule.FindCondition(s.Status.Conditions, fleet.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("Ready %+v", c)
			}
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
				return err
			}
			if !cluster.Status.Scheduled {
				return fmt.Errorf("cluster not scheduled")
			}
			return nil
		})
	})
}

// reconciledSchedule creates a copy of s named name with the finalizer and
// a status listing clusters, as Rancher Fleet or an enabled run leaves it.
func reconciledSchedule(t *testing.T, s *fleet.Schedule, name string, clusters ...string) *fleet.Schedule {
	t.Helper()
	ctx := context.Background()
	r := s.DeepCopy()
	r.ObjectMeta = metav1.ObjectMeta{Namespace: s.Namespace, Name: name, Finalizers: []string{schedule.Finalizer}}
	r.Spec.Targets.Clusters = nil
	for _, c := range clusters {
		r.Spec.Targets.Clusters = append(r.Spec.Targets.Clusters, fleet.ScheduleTarget{ClusterName: c})
	}
	if err := up.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.Status.MatchingClusters = clusters
	if err := up.Client.Status().Update(ctx, r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = up.Client.Patch(ctx, r, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		_ = up.Client.Delete(ctx, r)
	})
	return r
}

// expectFlagged checks that the named clusters, registered by the
// manager, are still scheduled.
func expectFlagged(ctx context.Context, clusters map[string]*fleet.Cluster, names ...string) error {
	for _, n := range names {
		c := clusters[n]
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if c.Status.Namespace == "" {
			return fmt.Errorf("cluster %s not registered yet", n)
		}
		if !c.Status.Scheduled {
			return fmt.Errorf("cluster %s no longer scheduled", n)
		}
	}
	return nil
}

// TestDisabledSchedulesAwaitNoCRD: with Schedules disabled, no component
// waits for the Schedule CRD (without it no Schedule can hold a cluster);
// enabled, the Schedule controller does.
func TestDisabledSchedulesAwaitNoCRD(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		var awaited []string
		for _, c := range components {
			if c.CRD == "Schedule" && !c.SkipWithoutCRD && (c.Enabled == nil || c.Enabled(Options{Schedules: enabled})) {
				awaited = append(awaited, c.Name)
			}
		}
		if enabled != (len(awaited) == 1) {
			t.Errorf("schedules enabled %v: awaiting the Schedule CRD: %v", enabled, awaited)
		}
	}
}

// TestAwaitedSetupKeepsTheManagerContext: a component set up once its CRD
// appears gets the manager's context, still live after the poller, with
// nothing left to await, has returned.
func TestAwaitedSetupKeepsTheManagerContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got context.Context
	p := &servedKindsPoller{cfg: up.Config, awaited: []Component{{Name: "late", CRD: "Schedule"}},
		setup: func(ctx context.Context, _ Component) error { got = ctx; return nil }}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("the served Schedule CRD's component was not set up")
	}
	if err := got.Err(); err != nil {
		t.Errorf("set up with a context already ended (%v), want the live manager context", err)
	}
}
