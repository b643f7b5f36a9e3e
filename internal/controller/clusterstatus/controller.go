// Package clusterstatus keeps the targeting-owned part of Cluster status
// (bundle summary, ready counts, state, Ready and Offline conditions) and the
// ClusterGroup status up to date, and marks the BundleDeployments of offline
// clusters Offline so that they neither block rollouts nor look current.
package clusterstatus

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/controller/since"
)

// Options configure the status controllers.
type Options struct {
	// OfflineThreshold is how long after its last check-in a cluster is
	// Offline (the manager passes 3 × its agent check-in interval); a
	// cluster whose agent reports a longer interval gets 3 × that
	// (OfflineAfter).
	OfflineThreshold time.Duration
	// Coalesce delays reconciles caused by BundleDeployment and Cluster
	// status churn so that a burst gives one write (default 1s).
	Coalesce time.Duration
	// Settle is how long the passing states of a cluster go unwritten: a
	// cluster registered moments ago whose agent has not checked in yet,
	// and BundleDeployments its online agent has not applied yet, which
	// every cluster passes through in every rollout (default 30s). A
	// rollout then costs one Cluster status write, or none, instead of two;
	// a state that lasts longer is written as before. The Bundle's status
	// shows the rollout meanwhile (every 5 s). 30 s rather than less
	// because an agent with many deployments, or one waiting for its
	// workloads, easily takes longer than 10 s to report, and each write
	// stores the whole Cluster again: at 10 s, a 1,000-cluster rollout with
	// real installs still cost 1.6 status writes per cluster
	// (docs/scale-history.md, "Seventh pass").
	Settle time.Duration
	// RollupInterval is the least time between two writes of a cluster's
	// roll-up that change only counts (the Ready and Offline conditions and
	// the state stay as they are; default 15s). While bundles are being
	// created for thousands of clusters, each cluster gets a new
	// BundleDeployment every few seconds, and writing the count each time
	// was almost one Cluster status patch per BundleDeployment.
	RollupInterval time.Duration
	Workers        int
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.OfflineThreshold <= 0 {
		o.OfflineThreshold = 45 * time.Minute
	}
	if o.Coalesce <= 0 {
		o.Coalesce = time.Second
	}
	if o.Settle <= 0 {
		o.Settle = 30 * time.Second
	}
	if o.Workers <= 0 {
		o.Workers = 10
	}
	if o.RollupInterval <= 0 {
		o.RollupInterval = 15 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

const resync = 30 * time.Minute

func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d/10)+1))
}

type reconcileQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// Setup adds the Cluster and ClusterGroup status controllers to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opts.defaults()
	if err := bundle.SetupIndexes(ctx, mgr); err != nil {
		return err
	}
	cr := &ClusterReconciler{Client: mgr.GetClient(), Opts: opts}
	if err := cr.SetupWithManager(mgr); err != nil {
		return err
	}
	gr := &GroupReconciler{Client: mgr.GetClient(), Opts: opts}
	return gr.SetupWithManager(mgr)
}

// ClusterReconciler writes the targeting-owned Cluster status.
type ClusterReconciler struct {
	client.Client
	Opts Options

	// waiting records since when a cluster has had BundleDeployments its
	// online agent has not applied (see Options.Settle).
	waiting since.Tracker[types.NamespacedName]

	// written maps a cluster to when this reconciler last wrote its status
	// (see Options.RollupInterval).
	written sync.Map
}

// SetupWithManager watches Clusters and, coalesced, the BundleDeployments of
// their namespaces.
func (r *ClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	bdEnqueue := func(ctx context.Context, o client.Object, q reconcileQueue) {
		clusters := &fleet.ClusterList{}
		if err := r.List(ctx, clusters, client.MatchingFields{bundle.IndexClusterNamespace: o.GetNamespace()}, client.UnsafeDisableDeepCopy); err != nil {
			return
		}
		for _, c := range clusters.Items {
			q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}}, r.Opts.Coalesce)
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("clusterstatus").
		// A heartbeat that leaves the cluster online changes nothing
		// owned here: an idle fleet costs no reconciles.
		For(&fleet.Cluster{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return !HeartbeatOnly(e.ObjectOld.(*fleet.Cluster), e.ObjectNew.(*fleet.Cluster), r.Opts.Now(), r.Opts.OfflineThreshold)
		}})).
		Watches(&fleet.BundleDeployment{}, handler.Funcs{
			CreateFunc: func(ctx context.Context, e event.CreateEvent, q reconcileQueue) { bdEnqueue(ctx, e.Object, q) },
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q reconcileQueue) { bdEnqueue(ctx, e.ObjectNew, q) },
			DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q reconcileQueue) { bdEnqueue(ctx, e.Object, q) },
		}).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Opts.Workers}).
		Complete(r)
}

// Reconcile recomputes the owned status, patches it when it changed (with
// optimistic locking, since registration patches other fields and a merge
// patch replaces the conditions list), marks BundleDeployments offline or
// back online, and requeues for the moment the cluster would go offline.
func (r *ClusterReconciler) Reconcile(ctx context.Context, rq ctrl.Request) (ctrl.Result, error) {
	c := &fleet.Cluster{}
	if err := r.Get(ctx, rq.NamespacedName, c); err != nil {
		r.setWaiting(rq.NamespacedName, false)
		r.written.Delete(rq.NamespacedName)
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if c.DeletionTimestamp != nil || !ownNamespace(c) {
		r.setWaiting(rq.NamespacedName, false)
		return ctrl.Result{}, nil
	}
	bds := &fleet.BundleDeploymentList{}
	// Read-only: the cached objects are not copied (markDeployments copies
	// the few it changes).
	if err := r.List(ctx, bds, client.InNamespace(c.Status.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	now := r.Opts.Now()
	live := LivenessOf(c, now, r.Opts.OfflineThreshold)
	if err := r.markDeployments(ctx, bds.Items, live); err != nil {
		return ctrl.Result{}, err
	}
	owned := ComputeClusterStatus(c, bds.Items, live)
	waitingSince := r.setWaiting(rq.NamespacedName, WaitsForAgent(owned, live))
	updated := c.DeepCopy()
	owned.Apply(&updated.Status)
	if !equality.Semantic.DeepEqual(c.Status, updated.Status) {
		if until := HoldUntil(c, owned, live, waitingSince, r.Opts.Settle); now.Before(until) {
			return ctrl.Result{RequeueAfter: until.Sub(now) + 100*time.Millisecond}, nil
		}
		if CountsOnly(c, owned) {
			if until := r.lastWrite(rq.NamespacedName).Add(r.Opts.RollupInterval); now.Before(until) {
				return ctrl.Result{RequeueAfter: until.Sub(now) + 100*time.Millisecond}, nil
			}
		}
		if err := r.Status().Patch(ctx, updated, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: jitter(time.Second)}, nil
			}
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		r.written.Store(rq.NamespacedName, now)
	}
	if live.Offline {
		return ctrl.Result{RequeueAfter: jitter(resync)}, nil
	}
	// Wake up just after the cluster would turn offline.
	return ctrl.Result{RequeueAfter: min(live.NextCheck+time.Second, jitter(resync))}, nil
}

// lastWrite is when this reconciler last wrote the cluster's status (zero:
// not since it started).
func (r *ClusterReconciler) lastWrite(key types.NamespacedName) time.Time {
	if v, ok := r.written.Load(key); ok {
		return v.(time.Time)
	}
	return time.Time{}
}

// setWaiting records whether the cluster waits for its agent and returns
// since when (zero when it does not).
func (r *ClusterReconciler) setWaiting(key types.NamespacedName, waiting bool) time.Time {
	if !waiting {
		r.waiting.Clear(key)
		return time.Time{}
	}
	return r.waiting.Mark(key, r.Opts.Now())
}

// markDeployments sets (offline) or removes (online) the Offline condition
// on the cluster's BundleDeployments, only where it differs.
func (r *ClusterReconciler) markDeployments(ctx context.Context, bds []fleet.BundleDeployment, live Liveness) error {
	for i := range bds {
		bd := &bds[i]
		has := meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ConditionOffline)
		if has == live.Offline {
			continue
		}
		updated := bd.DeepCopy()
		if live.Offline {
			msg := "the cluster's agent is offline"
			if live.NeverSeen {
				msg = "the cluster's agent has not checked in yet"
			}
			meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue, Reason: "AgentOffline", Message: msg})
			updated.Status.Display.State = string(fleet.Offline)
		} else {
			meta.RemoveStatusCondition(&updated.Status.Conditions, fleet.ConditionOffline)
			if updated.Status.Display.State == string(fleet.Offline) {
				updated.Status.Display.State = ""
			}
		}
		if err := r.Status().Patch(ctx, updated, client.MergeFromWithOptions(bd, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("marking BundleDeployment %s/%s: %w", bd.Namespace, bd.Name, err)
		}
	}
	return nil
}

// GroupReconciler writes ClusterGroup status.
type GroupReconciler struct {
	client.Client
	Opts Options
}

// SetupWithManager watches ClusterGroups and, coalesced, the Clusters of
// their namespace.
func (r *GroupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	enqueue := func(ctx context.Context, o client.Object, q reconcileQueue) {
		groups := &fleet.ClusterGroupList{}
		if err := r.List(ctx, groups, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
			return
		}
		for _, g := range groups.Items {
			q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: g.Namespace, Name: g.Name}}, r.Opts.Coalesce)
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("clustergroupstatus").
		For(&fleet.ClusterGroup{}).
		Watches(&fleet.Cluster{}, handler.Funcs{
			CreateFunc: func(ctx context.Context, e event.CreateEvent, q reconcileQueue) { enqueue(ctx, e.Object, q) },
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q reconcileQueue) {
				o, n := e.ObjectOld.(*fleet.Cluster), e.ObjectNew.(*fleet.Cluster)
				// Heartbeats alone change nothing a group shows.
				if equality.Semantic.DeepEqual(o.Labels, n.Labels) && equality.Semantic.DeepEqual(o.Status.Summary, n.Status.Summary) &&
					equality.Semantic.DeepEqual(o.Status.Conditions, n.Status.Conditions) && o.Status.ResourceCounts == n.Status.ResourceCounts {
					return
				}
				enqueue(ctx, n, q)
			},
			DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q reconcileQueue) { enqueue(ctx, e.Object, q) },
		}).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Opts.Workers}).
		Complete(r)
}

// Reconcile recomputes the group status from the cached clusters and
// patches it when it changed.
func (r *GroupReconciler) Reconcile(ctx context.Context, rq ctrl.Request) (ctrl.Result, error) {
	g := &fleet.ClusterGroup{}
	if err := r.Get(ctx, rq.NamespacedName, g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	clusters := &fleet.ClusterList{}
	if err := r.List(ctx, clusters, client.InNamespace(g.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	st := ComputeGroupStatus(g, clusters.Items)
	if equality.Semantic.DeepEqual(g.Status, st) {
		return ctrl.Result{}, nil
	}
	updated := g.DeepCopy()
	updated.Status = st
	if err := r.Status().Patch(ctx, updated, client.MergeFrom(g)); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}
