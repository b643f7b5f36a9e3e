// Package schedule serves Rancher Fleet's Schedule kind (experimental in
// Rancher Fleet v0.14) on the manager: it sets status.scheduled on the
// Clusters a Schedule targets and status.activeSchedule while one of its
// windows is open, and clears both when no Schedule targets a cluster any
// more. The Bundle controller turns them into BundleDeployment
// spec.offSchedule, which the agent obeys.
//
// The controller keeps no timers of its own: every reconcile recomputes,
// from the clock, the flags of all the Clusters of the Schedule's
// namespace from all of its Schedules, and asks to be woken just after the
// Schedule's next window start or end. A restart, or a missed wake-up,
// therefore loses nothing.
package schedule

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/finalizer"
)

// Finalizer is Rancher Fleet's: a Schedule is released once the flags
// of the clusters it targeted are cleared.
const Finalizer = "fleet.cattle.io/schedule-finalizer"

// EnvEnable is the environment variable that enables Schedules, as in
// Rancher Fleet (any value strconv.ParseBool takes as true).
const EnvEnable = "EXPERIMENTAL_SCHEDULES"

// maxWait bounds a wake-up: a Schedule whose next start is further away
// (a yearly expression) is looked at again after this long, which also
// keeps the wait within time.Duration.
const maxWait = 24 * time.Hour

// Options configure the controller.
type Options struct {
	// Workers is the number of concurrent reconciles (default 1: each
	// reconcile writes the flags of a whole namespace).
	Workers int
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Reconciler reconciles Schedules.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Opts     Options
}

// Setup registers the Schedule controller with mgr.
func Setup(_ context.Context, mgr ctrl.Manager, opts Options) error {
	opts.defaults()
	r := &Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-schedule"), Opts: opts}
	return ctrl.NewControllerManagedBy(mgr).
		Named("schedule").
		// Every change, status included: a status write of this
		// controller that the cache shows late is then compared again.
		For(&fleet.Schedule{}).
		Watches(&fleet.Cluster{}, r.namespaceSchedules(), clusterChanged).
		Watches(&fleet.ClusterGroup{}, r.namespaceSchedules(), groupChanged).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Workers}).
		Complete(r)
}

// Reconcile runs: fetch → finalizer (clear the flags on deletion) →
// flags of the namespace's clusters → status → wake-up at the next
// boundary.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &fleet.Schedule{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without this controller's finalizer (it was off):
			// the namespace's flags no longer count it.
			_, err := r.syncNamespace(ctx, req.Namespace, r.Opts.Now())
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, err
	}
	deleting, err := finalizer.Handle(ctx, r.Client, s, Finalizer, func(ctx context.Context) error {
		_, err := r.syncNamespace(ctx, req.Namespace, r.Opts.Now())
		return err
	})
	if deleting || err != nil {
		return ctrl.Result{}, err
	}
	now := r.Opts.Now()
	evals, err := r.syncNamespace(ctx, req.Namespace, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	e, ok := evals[s.Name]
	if !ok {
		return ctrl.Result{}, nil
	}
	if err := r.writeStatus(ctx, s, ComputeStatus(s, e, now)); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: wakeAfter(e, now)}, nil
}

// syncNamespace evaluates, at now, every Schedule of ns that is not being
// deleted and writes the flags of each of its Clusters that differ.
func (r *Reconciler) syncNamespace(ctx context.Context, ns string, now time.Time) (map[string]Evaluation, error) {
	schedules := &fleet.ScheduleList{}
	clusters := &fleet.ClusterList{}
	groups := &fleet.ClusterGroupList{}
	for _, l := range []client.ObjectList{schedules, clusters, groups} {
		if err := r.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
			return nil, err
		}
	}
	gs := make([]*fleet.ClusterGroup, len(groups.Items))
	for i := range groups.Items {
		gs[i] = &groups.Items[i]
	}
	evals := map[string]Evaluation{}
	var list []Evaluation
	for i := range schedules.Items {
		s := &schedules.Items[i]
		if !s.DeletionTimestamp.IsZero() {
			continue
		}
		e := Evaluate(s, clusters.Items, gs, now)
		evals[s.Name] = e
		list = append(list, e)
	}
	want := DesiredFlags(list, clusters.Items)
	for i := range clusters.Items {
		c := &clusters.Items[i]
		if f, ok := want[c.Name]; ok && f != FlagsOf(c) {
			if err := patchFlags(ctx, r.Client, c, f); err != nil {
				return nil, err
			}
		}
	}
	return evals, nil
}

// patchFlags writes only scheduled and activeSchedule, as a JSON merge
// patch without resourceVersion: the other writers of Cluster status
// (registration, the cluster status controller, agent check-ins) write
// other fields, so neither side can lose or undo the other's. False is
// written as null (the field removed), as an omitempty field reads.
func patchFlags(ctx context.Context, c client.Client, cluster *fleet.Cluster, f Flags) error {
	val := func(b bool) any {
		if b {
			return true
		}
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"scheduled": val(f.Scheduled), "activeSchedule": val(f.Active),
	}})
	if err != nil {
		return err
	}
	obj := &fleet.Cluster{}
	obj.Namespace, obj.Name = cluster.Namespace, cluster.Name
	err = c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
	return client.IgnoreNotFound(err)
}

// writeStatus patches the status when it changed, and records a Warning
// Event when the spec became invalid or its error changed.
func (r *Reconciler) writeStatus(ctx context.Context, s *fleet.Schedule, st fleet.ScheduleStatus) error {
	if equality.Semantic.DeepEqual(s.Status, st) {
		return nil
	}
	failed := newFailure(s.Status, st)
	updated := s.DeepCopy()
	updated.Status = st
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFrom(s)); err != nil {
		return client.IgnoreNotFound(err)
	}
	if failed != nil && r.Recorder != nil {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, failed.Reason, "Schedule", "%s", failed.Message)
	}
	return nil
}

// newFailure is the Ready condition of next when it is False and was not
// False with the same message in prev: the one an Event is recorded for.
func newFailure(prev, next fleet.ScheduleStatus) *metav1.Condition {
	c := meta.FindStatusCondition(next.Conditions, fleet.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse {
		return nil
	}
	if p := meta.FindStatusCondition(prev.Conditions, fleet.ConditionReady); p != nil && p.Status == c.Status && p.Message == c.Message {
		return nil
	}
	return c
}

// wakeAfter is how long until just after the next window start or end of
// e: never before the boundary, so that the reconcile then sees the new
// state, plus up to a second of jitter. An invalid spec, or one that never
// starts again, is looked at again after maxWait.
func wakeAfter(e Evaluation, now time.Time) time.Duration {
	if e.Err != nil {
		return maxWait
	}
	b := e.Window.NextBoundary()
	if b.IsZero() || b.Sub(now) > maxWait {
		return maxWait
	}
	d := b.Sub(now)
	if d < 0 {
		d = 0
	}
	return d + 10*time.Millisecond + rand.N(time.Second)
}
