// Package schedule serves Rancher Fleet's Schedule kind (experimental in
// Rancher Fleet v0.14) on the manager: it sets status.scheduled on the
// Clusters a Schedule targets and status.activeSchedule while one of its
// windows is open, and clears both when no Schedule targets a cluster any
// more. The Bundle controller turns them into BundleDeployment
// spec.offSchedule, which the agent obeys.
//
// Work is per namespace: a queue item is a namespace, and one reconcile
// recomputes, from the clock, the flags of all of its Clusters from all of
// its Schedules, writes the status of each Schedule, and asks to be woken
// just after the earliest next window start or end. The controller keeps
// no timers of its own, so a restart, or a missed wake-up, loses nothing.
package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
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
	// Workers is the number of namespaces reconciled at once (default 1).
	Workers int
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// maxPatches bounds the Cluster patches one reconcile has in flight.
const maxPatches = 8

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Reconciler reconciles the Schedules of a namespace.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Opts     Options
}

// Setup registers the Schedule controller with mgr. Its queue items are
// namespaces (a request with an empty name).
func Setup(_ context.Context, mgr ctrl.Manager, opts Options) error {
	opts.defaults()
	r := &Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("fleet-schedule"), Opts: opts}
	return ctrl.NewControllerManagedBy(mgr).
		Named("schedule").
		// Every change, status included: a status write of this
		// controller that the cache shows late is then compared again.
		Watches(&fleet.Schedule{}, handler.EnqueueRequestsFromMapFunc(namespaceOf)).
		Watches(&fleet.Cluster{}, r.clusterNamespace(), clusterChanged).
		Watches(&fleet.ClusterGroup{}, r.scheduledNamespace(), groupChanged).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Workers}).
		Complete(r)
}

// Reconcile runs for one namespace: finalizers on new Schedules → flags
// of its clusters → finalizers off deleted Schedules whose clusters were
// all written → status of each Schedule → wake-up at the earliest
// boundary. A failed write does not stop the others; the errors are
// returned together, so the namespace is retried.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	schedules := &fleet.ScheduleList{}
	clusters := &fleet.ClusterList{}
	groups := &fleet.ClusterGroupList{}
	for _, l := range []client.ObjectList{schedules, clusters, groups} {
		if err := r.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
			return ctrl.Result{}, err
		}
	}
	now := r.Opts.Now()
	infos := ClusterInfos(clusters.Items, pointers(groups.Items))
	live, deleting, errs := r.holdSchedules(ctx, schedules.Items)
	evals := make([]Evaluation, len(live))
	for i, s := range live {
		evals[i] = Evaluate(s, infos, now)
	}
	var forced []string
	for _, s := range deleting {
		forced = append(forced, ownClusters(s, infos)...)
	}
	want := DesiredFlags(evals, clusters.Items)
	failed := r.patchAll(ctx, ns, Writes(want, clusters.Items, forced))
	for _, err := range failed {
		errs = append(errs, err)
	}
	for _, s := range deleting {
		errs = append(errs, r.release(ctx, s, infos, failed))
	}
	wake := maxWait
	for i, s := range live {
		errs = append(errs, r.writeStatus(ctx, s, ComputeStatus(s, evals[i], now)))
		wake = min(wake, wakeAfter(evals[i], now))
	}
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	if len(live) == 0 {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: wake}, nil
}

// holdSchedules splits the Schedules of a namespace into live ones, each
// given the finalizer if it lacks it, and those being deleted that carry
// it (others being deleted no longer count, and are not held).
func (r *Reconciler) holdSchedules(ctx context.Context, all []fleet.Schedule) (live, deleting []*fleet.Schedule, errs []error) {
	for i := range all {
		s := &all[i]
		switch {
		case !s.DeletionTimestamp.IsZero():
			if slices.Contains(s.Finalizers, Finalizer) {
				deleting = append(deleting, s)
			}
		default:
			live = append(live, s)
			if !slices.Contains(s.Finalizers, Finalizer) {
				errs = append(errs, patchFinalizers(ctx, r.Client, s, append(slices.Clone(s.Finalizers), Finalizer)))
			}
		}
	}
	return live, deleting, errs
}

// ownClusters are the clusters a Schedule being deleted may have flagged:
// those its status lists and those it matches now.
func ownClusters(s *fleet.Schedule, infos []target.ClusterInfo) []string {
	own := slices.Clone(s.Status.MatchingClusters)
	if m, err := Matching(s, infos); err == nil {
		own = append(own, m...)
	}
	return own
}

// release removes the finalizer of s once no write to its own clusters
// failed in this pass; other clusters' failures do not hold it.
func (r *Reconciler) release(ctx context.Context, s *fleet.Schedule, infos []target.ClusterInfo, failed map[string]error) error {
	for _, n := range ownClusters(s, infos) {
		if failed[n] != nil {
			return fmt.Errorf("schedule %s: keeping its finalizer until cluster %s is written", s.Name, n)
		}
	}
	return patchFinalizers(ctx, r.Client, s, slices.DeleteFunc(slices.Clone(s.Finalizers), func(f string) bool { return f == Finalizer }))
}

// patchAll writes the flags of every cluster of writes, at most
// maxPatches at a time, and returns the errors by cluster name.
func (r *Reconciler) patchAll(ctx context.Context, ns string, writes map[string]Flags) map[string]error {
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		failed = map[string]error{}
		slots  = make(chan struct{}, maxPatches)
	)
	for name, f := range writes {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := patchFlags(ctx, r.Client, ns, name, f); err != nil {
				mu.Lock()
				failed[name] = fmt.Errorf("cluster %s: %w", name, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// patchFlags writes only scheduled and activeSchedule, as a JSON merge
// patch without resourceVersion: the other writers of Cluster status
// (registration, the cluster status controller, agent check-ins) write
// other fields, so neither side can lose or undo the other's. False is
// written as null (the field removed), as an omitempty field reads.
func patchFlags(ctx context.Context, c client.Client, ns, name string, f Flags) error {
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
	obj.Namespace, obj.Name = ns, name
	err = c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
	return client.IgnoreNotFound(err)
}

// patchFinalizers sets the finalizers of s with a merge patch of
// metadata.finalizers guarded by resourceVersion: an Update would send
// the whole object back, rewriting a GitOps-applied spec (duration 2h
// reads back 2h0m0s), bumping its generation and showing drift.
func patchFinalizers(ctx context.Context, c client.Client, s *fleet.Schedule, finalizers []string) error {
	var list any = finalizers
	if len(finalizers) == 0 {
		list = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": list, "resourceVersion": s.ResourceVersion,
	}})
	if err != nil {
		return err
	}
	obj := &fleet.Schedule{}
	obj.Namespace, obj.Name = s.Namespace, s.Name
	err = c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
	return client.IgnoreNotFound(err)
}

// writeStatus patches the status when it changed, and records a Warning
// Event when the spec became invalid, its reason changed or the spec
// changed.
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
// False with the same reason for the same generation in prev: the one an
// Event is recorded for. The message is not compared, so that a detail
// that changes with the date does not repeat the Event.
func newFailure(prev, next fleet.ScheduleStatus) *fleet.ScheduleCondition {
	c := FindCondition(next.Conditions, fleet.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse {
		return nil
	}
	if p := FindCondition(prev.Conditions, fleet.ConditionReady); p != nil && p.Status == c.Status &&
		p.Reason == c.Reason && p.ObservedGeneration == c.ObservedGeneration {
		return nil
	}
	return c
}

// wakeAfter is how long until just after the next window start or end of
// e: never before the boundary, so that the reconcile then sees the new
// state, plus up to a second of jitter. An invalid ClusterGroup leaves the
// window followed (Evaluation.Matching). An invalid spec is
// looked at again at its Retry (overlapping windows: the next start), otherwise,
// like one that never starts again, after maxWait.
func wakeAfter(e Evaluation, now time.Time) time.Duration {
	b := e.Window.NextBoundary()
	if e.Err != nil && e.Err.Reason != ReasonInvalidClusterGroup {
		b = e.Retry
	}
	if b.IsZero() || b.Sub(now) > maxWait {
		return maxWait
	}
	d := b.Sub(now)
	if d < 0 {
		d = 0
	}
	return d + 10*time.Millisecond + rand.N(time.Second)
}
