package content

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/controller/since"
	"github.com/fleetgo/fleet/internal/names"
)

// RoleReconciler maintains fleet-content-<clusterNamespace>; requests carry
// the cluster namespace as Name.
//
// The bundle reconciler grants a Content before it writes the
// BundleDeployment that references it (see bundle.GrantsAnnotation), so on
// the happy path this reconciler never has to add anything. It adds a
// referenced Content at once if it is missing (repair), and removes what is
// no longer referenced lazily: only after the role has carried such extra
// grants for GrantGrace. A rollout therefore costs one ClusterRole write per
// cluster on its critical path (the grant) and one later (the prune of the
// previous Content), and an idle fleet none.
type RoleReconciler struct {
	client.Client
	// APIReader lists the agents' ServiceAccounts, which are not cached.
	APIReader client.Reader
	Opts      Options

	// staleSince records, per cluster namespace, since when its role has
	// granted more than it needs. In memory only: after a restart the
	// prune simply waits one more GrantGrace.
	staleSince since.Tracker[string]
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
func DesiredRules(contents []string) []rbacv1.PolicyRule { return bundle.ContentRules(contents) }

// rolePlan is what a role should become, from what the namespace's
// BundleDeployments reference and what the role grants now.
type rolePlan struct {
	// Names the role must list: the referenced Contents plus the fresh
	// grants it still lists.
	Names []string
	// Grants to keep in the annotation: fresh and not yet referenced.
	Grants map[string]time.Time
	// Missing: a referenced Content is not granted; write at once.
	Missing bool
	// Stale: the role grants a Content it no longer needs; prune lazily.
	Stale bool
	// Expiry is when the earliest kept grant stops being fresh (zero if
	// none): then it becomes stale unless a deployment references it.
	Expiry time.Time
}

// planRole is the pure decision of the RoleReconciler.
func planRole(referenced, granted []string, grants map[string]time.Time, now time.Time, grace time.Duration) rolePlan {
	p := rolePlan{Grants: map[string]time.Time{}}
	want := map[string]bool{}
	for _, n := range referenced {
		want[n] = true
	}
	for _, n := range granted {
		if want[n] {
			continue
		}
		if t, ok := grants[n]; ok && now.Sub(t) < grace {
			want[n] = true
			p.Grants[n] = t
			if exp := t.Add(grace); p.Expiry.IsZero() || exp.Before(p.Expiry) {
				p.Expiry = exp
			}
		}
	}
	for _, n := range referenced {
		if !slices.Contains(granted, n) {
			p.Missing = true
		}
	}
	for _, n := range granted {
		if !want[n] {
			p.Stale = true
		}
	}
	p.Names = slices.Sorted(maps.Keys(want))
	return p
}

// Reconcile keeps fleet-content-<ns> granting the Contents used by the
// BundleDeployments in ns (plus fresh grants made ahead of them), and
// removes it once ns has neither a Cluster nor a BundleDeployment.
func (r *RoleReconciler) Reconcile(ctx context.Context, rq ctrl.Request) (ctrl.Result, error) {
	ns := rq.Name
	bds := &fleet.BundleDeploymentList{}
	// Read-only: no copy of every deployment of the namespace.
	if err := r.List(ctx, bds, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	var referenced []string
	for i := range bds.Items {
		referenced = append(referenced, bundle.ContentsOf(&bds.Items[i])...)
	}
	clusters := &fleet.ClusterList{}
	if err := r.List(ctx, clusters, client.MatchingFields{bundle.IndexClusterNamespace: ns}, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	role := &rbacv1.ClusterRole{}
	err := r.Get(ctx, types.NamespacedName{Name: RoleName(ns)}, role)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	exists := err == nil
	if len(clusters.Items) == 0 && len(bds.Items) == 0 {
		r.staleSince.Clear(ns)
		if exists && role.Labels[RoleLabel] == ns {
			if err := r.Delete(ctx, role); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, nil
	}
	now := time.Now()
	if !exists {
		r.staleSince.Clear(ns)
		if err := r.bindAgents(ctx, ns); err != nil {
			return ctrl.Result{}, err
		}
		role = &rbacv1.ClusterRole{}
		bundle.SetContentRole(role, ns, referenced, nil)
		if err := r.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
		}
		return ctrl.Result{}, nil
	}
	granted := bundle.GrantedContents(role)
	p := planRole(referenced, granted, bundle.Grants(role), now, r.Opts.GrantGrace)
	// Anything but our one canonical rule (an edit) is repaired at once.
	canonical := rulesEqual(role.Rules, DesiredRules(granted)) && role.Labels[RoleLabel] == ns
	switch {
	case p.Missing || !canonical:
		// Write now.
	case p.Stale:
		staleFrom := r.staleSince.Mark(ns, now)
		if wait := r.Opts.GrantGrace - now.Sub(staleFrom); wait > 0 {
			return ctrl.Result{RequeueAfter: wait + spread(r.Opts.GrantGrace)}, nil
		}
	default:
		r.staleSince.Clear(ns)
		return p.recheck(now, r.Opts.GrantGrace), nil
	}
	bundle.SetContentRole(role, ns, p.Names, p.Grants)
	// The update carries the cached resourceVersion: a grant written
	// meanwhile makes it fail with a conflict and retry on fresh data.
	if err := r.Update(ctx, role); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating ClusterRole %s: %w", role.Name, err)
	}
	r.staleSince.Clear(ns)
	return p.recheck(now, r.Opts.GrantGrace), nil
}

// bindAgents gives every agent credential of ns (a ServiceAccount labelled
// with the registration it was granted for) the ClusterRoleBinding to the
// namespace's role, before the role is created. Registration binds a new
// agent itself when the content API is off; this covers agents registered
// while the manager served the content API, whose credentials have no such
// binding, once the manager runs without it (by flag, or because the API
// server has no aggregation layer). A role is created once per namespace,
// so this costs one LIST of ServiceAccounts per cluster namespace.
func (r *RoleReconciler) bindAgents(ctx context.Context, ns string) error {
	sas := &corev1.ServiceAccountList{}
	if err := r.APIReader.List(ctx, sas, client.InNamespace(ns), client.HasLabels{fleet.CredentialOfRegistrationLabel}); err != nil {
		return fmt.Errorf("listing the agent credentials of %s: %w", ns, err)
	}
	for _, sa := range sas.Items {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: names.ContentBindingName(sa.Name), Labels: sa.Labels, Annotations: sa.Annotations},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RoleName(ns)},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}},
		}
		if err := r.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("binding ClusterRole %s: %w", RoleName(ns), err)
		}
	}
	return nil
}

// recheck looks at the role again when its earliest fresh grant expires
// (nothing when it has none): a grant made ahead of its deployment must go
// if the deployment never came.
func (p rolePlan) recheck(now time.Time, grace time.Duration) ctrl.Result {
	if p.Expiry.IsZero() {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: p.Expiry.Sub(now) + spread(grace)}
}

// spread is a small random delay so that the prunes after a rollout to many
// clusters do not all land in the same second.
func spread(d time.Duration) time.Duration {
	return time.Second + time.Duration(rand.Int64N(int64(d/5)+1))
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
