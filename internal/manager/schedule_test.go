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
// holds no cluster: it leaves a Schedule's spec and status alone, clears
// Cluster flags another run (or Rancher Fleet) left, and releases a
// Schedule being deleted that carries the finalizer. One with them
// enabled (what EXPERIMENTAL_SCHEDULES=true sets) marks the Cluster
// scheduled.
func TestSchedulesOnlyWhenEnabled(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "schedules-"}}
	if err := up.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "dev", Labels: map[string]string{"env": "dev"}}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	flags := client.RawPatch(types.MergePatchType, []byte(`{"status":{"scheduled":true,"activeSchedule":false}}`))
	if err := up.Client.Status().Patch(ctx, cluster, flags); err != nil {
		t.Fatal(err)
	}
	s := &fleet.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "hourly"}, Spec: fleet.ScheduleSpec{
		Schedule: "0 0 * * * *", Duration: metav1.Duration{Duration: 30 * time.Minute}, Location: "UTC",
		Targets: fleet.ScheduleTargets{Clusters: []fleet.ScheduleTarget{{ClusterName: "dev"}}}}}
	if err := up.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	// A Schedule Rancher Fleet (or an enabled run) reconciled, deleted
	// while Schedules are off.
	migrated := s.DeepCopy()
	migrated.ObjectMeta = metav1.ObjectMeta{Namespace: ns.Name, Name: "migrated", Finalizers: []string{schedule.Finalizer}}
	if err := up.Client.Create(ctx, migrated); err != nil {
		t.Fatal(err)
	}
	if err := up.Client.Delete(ctx, migrated); err != nil {
		t.Fatal(err)
	}
	quiet := Options{MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0", ContentAPI: serve.Options{Addr: "0"}}

	t.Run("disabled", func(t *testing.T) {
		startManager(t, quiet)
		eventually(t, time.Minute, func() error {
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
				return err
			}
			// Registration giving the Cluster its namespace shows the
			// manager is running.
			if cluster.Status.Namespace == "" || cluster.Status.Scheduled || cluster.Status.ActiveSchedule {
				return fmt.Errorf("cluster namespace %q, scheduled %v, active %v", cluster.Status.Namespace, cluster.Status.Scheduled, cluster.Status.ActiveSchedule)
			}
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(migrated), migrated); !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleted Schedule still there (finalizers %v): %v", migrated.Finalizers, err)
			}
			return nil
		})
		time.Sleep(2 * time.Second)
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			t.Fatal(err)
		}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			t.Fatal(err)
		}
		if len(s.Finalizers) != 0 || len(s.Status.Conditions) != 0 || cluster.Status.Scheduled {
			t.Errorf("disabled, yet finalizers %v, conditions %v, cluster scheduled %v", s.Finalizers, s.Status.Conditions, cluster.Status.Scheduled)
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
