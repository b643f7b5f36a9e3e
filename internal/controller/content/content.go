// Package content keeps Contents alive exactly as long as BundleDeployments
// reference them, and maintains, per cluster namespace, the ClusterRole
// `fleet-content-<clusterNamespace>` that lets that cluster's agent `get`
// only the Contents its own BundleDeployments use (contract 3).
package content

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
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
	Workers  int
}

func (o *Options) defaults() {
	if o.PurgeGrace <= 0 {
		o.PurgeGrace = 30 * time.Second
	}
	if o.Coalesce <= 0 {
		o.Coalesce = time.Second
	}
	if o.Workers <= 0 {
		o.Workers = 5
	}
}

// RoleLabel marks the ClusterRoles this package maintains; its value is the
// cluster namespace.
const RoleLabel = "fleet.cattle.io/content-role-for"

// RoleName is the ClusterRole of a cluster namespace.
func RoleName(clusterNamespace string) string { return "fleet-content-" + clusterNamespace }

// Setup adds both controllers to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opts.defaults()
	if err := bundle.SetupIndexes(ctx, mgr); err != nil {
		return err
	}
	cr := &ContentReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Opts: opts}
	if err := cr.SetupWithManager(mgr); err != nil {
		return err
	}
	rr := &RoleReconciler{Client: mgr.GetClient(), Opts: opts}
	return rr.SetupWithManager(mgr)
}

type queue = handler.TypedFuncs[client.Object, reconcile.Request]

type reconcileQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// ContentReconciler counts references and purges unreferenced Contents.
type ContentReconciler struct {
	client.Client
	APIReader client.Reader
	Opts      Options
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
	c := &metav1.PartialObjectMetadata{}
	c.SetGroupVersionKind(fleet.GroupVersion.WithKind("Content"))
	if err := r.Get(ctx, rq.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if c.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	bds := &fleet.BundleDeploymentList{}
	if err := r.List(ctx, bds, client.MatchingFields{bundle.IndexBDContent: c.Name}); err != nil {
		return ctrl.Result{}, err
	}
	refs := 0
	for i := range bds.Items {
		if bds.Items[i].DeletionTimestamp == nil {
			refs++
		}
	}
	if err := r.setReferenceCount(ctx, c.Name, refs); err != nil {
		return ctrl.Result{}, err
	}
	if refs > 0 {
		return ctrl.Result{}, nil
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

// setReferenceCount patches status.referenceCount when it differs.
func (r *ContentReconciler) setReferenceCount(ctx context.Context, name string, refs int) error {
	full := &fleet.Content{}
	// Only metadata is cached (payloads can be large), so the stored count
	// is read with one uncached GET; the patch is skipped when equal.
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, full); err != nil {
		return client.IgnoreNotFound(err)
	}
	if full.Status.ReferenceCount == refs {
		return nil
	}
	patch := []byte(fmt.Sprintf(`{"status":{"referenceCount":%d}}`, refs))
	if err := r.Status().Patch(ctx, &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

// RoleReconciler maintains fleet-content-<clusterNamespace>; requests carry
// the cluster namespace as Name.
type RoleReconciler struct {
	client.Client
	Opts Options
}

// SetupWithManager watches BundleDeployments, Clusters and the roles
// themselves (to repair edits).
func (r *RoleReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byName := func(ns string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Name: ns}}
	}
	bdEnqueue := func(o client.Object, q reconcileQueue) { q.AddAfter(byName(o.GetNamespace()), r.Opts.Coalesce) }
	return ctrl.NewControllerManagedBy(mgr).
		Named("content-role").
		Watches(&fleet.BundleDeployment{}, queue{
			CreateFunc: func(_ context.Context, e event.CreateEvent, q reconcileQueue) { bdEnqueue(e.Object, q) },
			UpdateFunc: func(_ context.Context, e event.UpdateEvent, q reconcileQueue) {
				if !slices.Equal(bundle.ContentsOf(e.ObjectOld.(*fleet.BundleDeployment)), bundle.ContentsOf(e.ObjectNew.(*fleet.BundleDeployment))) {
					bdEnqueue(e.ObjectNew, q)
				}
			},
			DeleteFunc: func(_ context.Context, e event.DeleteEvent, q reconcileQueue) { bdEnqueue(e.Object, q) },
		}).
		Watches(&fleet.Cluster{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if ns := o.(*fleet.Cluster).Status.Namespace; ns != "" {
				return []reconcile.Request{byName(ns)}
			}
			return nil
		})).
		Watches(&rbacv1.ClusterRole{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if ns := o.GetLabels()[RoleLabel]; ns != "" {
				return []reconcile.Request{byName(ns)}
			}
			return nil
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Opts.Workers}).
		Complete(r)
}

// DesiredRules is the single rule of a role: get on exactly these Contents;
// no rule at all when there are none (an empty resourceNames would allow
// every Content).
func DesiredRules(contents []string) []rbacv1.PolicyRule {
	if len(contents) == 0 {
		return nil
	}
	names := slices.Clone(contents)
	slices.Sort(names)
	names = slices.Compact(names)
	return []rbacv1.PolicyRule{{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"contents"}, Verbs: []string{"get"}, ResourceNames: names}}
}

// Reconcile makes fleet-content-<ns> list exactly the Contents used by the
// BundleDeployments in ns, and removes it once ns has neither a Cluster nor
// a BundleDeployment.
func (r *RoleReconciler) Reconcile(ctx context.Context, rq ctrl.Request) (ctrl.Result, error) {
	ns := rq.Name
	bds := &fleet.BundleDeploymentList{}
	if err := r.List(ctx, bds, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, err
	}
	var contents []string
	for i := range bds.Items {
		contents = append(contents, bundle.ContentsOf(&bds.Items[i])...)
	}
	clusters := &fleet.ClusterList{}
	if err := r.List(ctx, clusters, client.MatchingFields{bundle.IndexClusterNamespace: ns}); err != nil {
		return ctrl.Result{}, err
	}
	role := &rbacv1.ClusterRole{}
	err := r.Get(ctx, types.NamespacedName{Name: RoleName(ns)}, role)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	exists := err == nil
	if len(clusters.Items) == 0 && len(bds.Items) == 0 {
		if exists && role.Labels[RoleLabel] == ns {
			if err := r.Delete(ctx, role); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, nil
	}
	rules := DesiredRules(contents)
	if !exists {
		role = &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: RoleName(ns), Labels: map[string]string{RoleLabel: ns, fleet.ManagedLabel: "true"}},
			Rules:      rules,
		}
		if err := r.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
		}
		return ctrl.Result{}, nil
	}
	if rulesEqual(role.Rules, rules) && role.Labels[RoleLabel] == ns {
		return ctrl.Result{}, nil
	}
	role = role.DeepCopy()
	role.Rules = rules
	if role.Labels == nil {
		role.Labels = map[string]string{}
	}
	role.Labels[RoleLabel] = ns
	role.Labels[fleet.ManagedLabel] = "true"
	if err := r.Update(ctx, role); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating ClusterRole %s: %w", role.Name, err)
	}
	return ctrl.Result{}, nil
}

func rulesEqual(a, b []rbacv1.PolicyRule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !slices.Equal(a[i].APIGroups, b[i].APIGroups) || !slices.Equal(a[i].Resources, b[i].Resources) ||
			!slices.Equal(a[i].Verbs, b[i].Verbs) || !slices.Equal(a[i].ResourceNames, b[i].ResourceNames) ||
			len(a[i].NonResourceURLs) > 0 {
			return false
		}
	}
	return true
}
