// Package content keeps Contents alive exactly as long as BundleDeployments
// reference them. For a manager without the content API (package
// contentapi) it also maintains, per cluster namespace, the ClusterRole
// `fleet-content-<clusterNamespace>` that lets that cluster's agent `get`
// only the Contents its own BundleDeployments use (contract 3). The bundle
// reconciler adds a new Content to that role before it publishes a
// deployment using it; this package keeps such grants for GrantGrace and
// prunes what is no longer referenced lazily (see RoleReconciler).
package content

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/kubeclient"
)

// Options configure the Content controllers.
type Options struct {
	// PurgeGrace is how long an unreferenced Content is kept: a new
	// Content is written before the BundleDeployments that use it.
	// Default 30s.
	PurgeGrace time.Duration
	// Coalesce delays reconciles caused by BundleDeployment events
	// (default 1s).
	Coalesce time.Duration
	// CountInterval is the least time between two writes of a Content's
	// status.referenceCount while it stays above zero (default 10s): a
	// status write stores the whole Content (manifests included) again,
	// and a rollout moves the counts of two Contents one deployment at a
	// time. Reaching or leaving zero is written at once.
	CountInterval time.Duration
	// GrantGrace is how long a cluster's ClusterRole keeps a Content that
	// no BundleDeployment there references: a grant the bundle reconciler
	// made ahead of the deployment, or one left over after a rollout or a
	// removed target. Pruning is lazy so that it never competes with a
	// rollout's writes; access ends within about GrantGrace (default 30s).
	GrantGrace time.Duration
	Workers    int
	// ContentRBAC maintains the per-cluster Content ClusterRoles, for a
	// manager without the content API (see bundle.Options.ContentRBAC).
	ContentRBAC bool
}

func (o *Options) defaults() {
	if o.PurgeGrace <= 0 {
		o.PurgeGrace = 30 * time.Second
	}
	if o.Coalesce <= 0 {
		o.Coalesce = time.Second
	}
	if o.GrantGrace <= 0 {
		o.GrantGrace = 30 * time.Second
	}
	if o.CountInterval <= 0 {
		o.CountInterval = 10 * time.Second
	}
	if o.Workers <= 0 {
		o.Workers = 5
	}
}

// RoleLabel marks the ClusterRoles this package maintains; its value is the
// cluster namespace.
const RoleLabel = bundle.ContentRoleLabel

// RoleName is the ClusterRole of a cluster namespace.
func RoleName(clusterNamespace string) string { return bundle.ContentRoleName(clusterNamespace) }

// Setup adds both controllers to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opts.defaults()
	if err := bundle.SetupIndexes(ctx, mgr); err != nil {
		return err
	}
	objs, err := bundle.NewCachedObjects(ctx, mgr.GetCache())
	if err != nil {
		return err
	}
	cr := &ContentReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Opts: opts, objs: objs}
	if err := cr.SetupWithManager(mgr); err != nil {
		return err
	}
	if !opts.ContentRBAC {
		return nil
	}
	rr := &RoleReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Opts: opts}
	return rr.SetupWithManager(mgr)
}

type queue = handler.TypedFuncs[client.Object, reconcile.Request]

type reconcileQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// ContentReconciler counts references and purges unreferenced Contents.
type ContentReconciler struct {
	client.Client
	APIReader client.Reader
	Opts      Options

	objs *bundle.CachedObjects
	// written maps a Content to the reference count (and UID) last read or written,
	// so that a reconcile whose count did not change makes no request
	// (payloads are not cached, so checking costs a full GET).
	written sync.Map
}

// SetupWithManager watches Contents (metadata only: payloads are never
// cached) and BundleDeployments.
func (r *ContentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	enqueue := func(o client.Object, q reconcileQueue) {
		if bd, ok := o.(*fleet.BundleDeployment); ok {
			for _, name := range bundle.ContentsOf(bd) {
				q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}, r.Opts.Coalesce)
			}
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("content").
		For(&fleet.Content{}, builder.OnlyMetadata).
		Watches(&fleet.BundleDeployment{}, queue{
			CreateFunc: func(_ context.Context, e event.CreateEvent, q reconcileQueue) { enqueue(e.Object, q) },
			UpdateFunc: func(_ context.Context, e event.UpdateEvent, q reconcileQueue) {
				enqueue(e.ObjectOld, q)
				enqueue(e.ObjectNew, q)
			},
			DeleteFunc: func(_ context.Context, e event.DeleteEvent, q reconcileQueue) { enqueue(e.Object, q) },
		}).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Opts.Workers}).
		Complete(r)
}

// Reconcile updates status.referenceCount and deletes a Content nothing has
// referenced for PurgeGrace.
func (r *ContentReconciler) Reconcile(ctx context.Context, rq ctrl.Request) (ctrl.Result, error) {
	c := kubeclient.MetadataOf(fleet.GroupVersion.WithKind("Content"))
	if err := r.Get(ctx, rq.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.Delete(rq.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if c.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	bds, err := r.objs.DeploymentsUsing(c.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	refs := 0
	for _, bd := range bds {
		if bd.DeletionTimestamp == nil {
			refs++
		}
	}
	wait, err := r.setReferenceCount(ctx, c.Name, c.UID, refs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if refs > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if age := time.Since(c.CreationTimestamp.Time); age < r.Opts.PurgeGrace {
		return ctrl.Result{RequeueAfter: r.Opts.PurgeGrace - age + time.Duration(rand.Int64N(int64(time.Second)))}, nil
	}
	// The cache may lag behind a BundleDeployment created a moment ago:
	// confirm with the API server before deleting (rare: once per purge).
	live := &fleet.BundleDeploymentList{}
	if err := r.APIReader.List(ctx, live, client.MatchingLabels{fleet.ContentNameLabel: c.Name}, client.Limit(1)); err != nil {
		return ctrl.Result{}, err
	}
	if len(live.Items) > 0 {
		return ctrl.Result{RequeueAfter: r.Opts.PurgeGrace}, nil
	}
	obj := &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: c.Name}}
	if err := r.Delete(ctx, obj, client.Preconditions{UID: &c.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return ctrl.Result{}, fmt.Errorf("deleting unreferenced Content %s: %w", c.Name, err)
	}
	return ctrl.Result{}, nil
}

// countOf is the reference count written for one copy of a Content, and
// when.
type countOf struct {
	uid  types.UID
	refs int
	at   time.Time
}

// countDue decides whether count refs is written now, given the count
// last written (if written): not when it is the same; not yet (wait)
// while the count stays above zero and the last write is more recent than
// interval.
func countDue(last countOf, written bool, refs int, interval time.Duration, now time.Time) (write bool, wait time.Duration) {
	if !written {
		return true, 0
	}
	if last.refs == refs {
		return false, 0
	}
	if last.refs > 0 && refs > 0 {
		if wait := interval - now.Sub(last.at); wait > 0 {
			return false, wait
		}
	}
	return true, 0
}

// setReferenceCount patches status.referenceCount when it differs. While
// the count stays above zero, writes are at least CountInterval apart: it
// then returns how long to wait before the pending count is written.
func (r *ContentReconciler) setReferenceCount(ctx context.Context, name string, uid types.UID, refs int) (time.Duration, error) {
	// Only metadata is cached (payloads can be large). The count this
	// reconciler wrote last is remembered (per UID: a Content deleted and
	// created again under its name starts from what its new copy stores);
	// only a Content it has not written yet (since it started) is read,
	// with one uncached GET, to skip an equal write.
	v, written := r.written.Load(name)
	last, _ := v.(countOf)
	written = written && last.uid == uid
	if write, wait := countDue(last, written, refs, r.Opts.CountInterval, time.Now()); !write {
		return wait, nil
	}
	stored := -1
	if !written {
		full := &fleet.Content{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, full); err != nil {
			return 0, client.IgnoreNotFound(err)
		}
		stored = full.Status.ReferenceCount
	}
	if stored != refs {
		patch := []byte(fmt.Sprintf(`{"status":{"referenceCount":%d}}`, refs))
		if err := r.Status().Patch(ctx, &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return 0, client.IgnoreNotFound(err)
		}
	}
	r.written.Store(name, countOf{uid: uid, refs: refs, at: time.Now()})
	return 0, nil
}
