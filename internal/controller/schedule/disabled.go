package schedule

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// SetupDisabled registers what runs while Schedules are disabled:
// disabled means no cluster is held. The Bundle controller obeys the
// Cluster flags whoever set them, so flags left by an earlier enabled run
// or by Rancher Fleet are cleared; and a Schedule carrying the finalizer
// (every one Rancher Fleet or an enabled run reconciled) is released when
// deleted, so that it, and its namespace, can go. Without the Schedule
// CRD there is nothing to do (and nothing to watch).
func SetupDisabled(_ context.Context, mgr ctrl.Manager) error {
	if _, err := mgr.GetRESTMapper().RESTMapping(fleet.GroupVersion.WithKind("Schedule").GroupKind(), fleet.GroupVersion.Version); err != nil {
		if meta.IsNoMatchError(err) {
			return nil
		}
		return err
	}
	c := mgr.GetClient()
	err := ctrl.NewControllerManagedBy(mgr).
		Named("schedule-disabled-flags").
		For(&fleet.Cluster{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			cl, ok := o.(*fleet.Cluster)
			return ok && FlagsOf(cl) != Flags{}
		}))).
		Complete(&clearFlags{client: c})
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("schedule-disabled-finalizer").
		For(&fleet.Schedule{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return !o.GetDeletionTimestamp().IsZero() && slices.Contains(o.GetFinalizers(), Finalizer)
		}))).
		Complete(&releaseDeleted{client: c})
}

// clearFlags clears scheduled and activeSchedule on a Cluster.
type clearFlags struct{ client client.Client }

func (r *clearFlags) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &fleet.Cluster{}
	if err := r.client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if FlagsOf(c) == (Flags{}) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, patchFlags(ctx, r.client, c.Namespace, c.Name, Flags{})
}

// releaseDeleted removes the finalizer from a Schedule being deleted.
type releaseDeleted struct{ client client.Client }

func (r *releaseDeleted) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &fleet.Schedule{}
	if err := r.client.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.DeletionTimestamp.IsZero() || !slices.Contains(s.Finalizers, Finalizer) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, patchFinalizers(ctx, r.client, s, slices.DeleteFunc(slices.Clone(s.Finalizers), func(f string) bool { return f == Finalizer }))
}
