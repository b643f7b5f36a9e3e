package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// SetupDisabled registers what runs while Schedules are disabled. As in
// Rancher Fleet with the flag off, Cluster flags are left alone: the
// Bundle controller keeps obeying them, so clusters a Schedule held stay
// held (clearing them would deploy held changes outside their windows).
// Only a Schedule being deleted with the finalizer is handled: the flags
// of its clusters that no remaining Schedule lists are cleared, then the
// finalizer is removed, so that it, and its namespace, can go. Held
// clusters are counted and logged once, with how to release them. The
// manager sets it up only while the Schedule CRD is served: without it
// nothing can be held.
func SetupDisabled(_ context.Context, mgr ctrl.Manager) error {
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		logHeld(ctx, mgr.GetAPIReader())
		return nil
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("schedule-disabled").
		For(&fleet.Schedule{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return !o.GetDeletionTimestamp().IsZero() && slices.Contains(o.GetFinalizers(), Finalizer)
		}))).
		Complete(&releaseDeleted{client: mgr.GetClient()})
}

// logHeld logs, once, how many Clusters carry a Schedule flag while
// Schedules are disabled, and how to release them. Read page by page
// from the API server: the cache of Clusters is not needed otherwise.
func logHeld(ctx context.Context, r client.Reader) {
	log := ctrl.Log.WithName("schedule-disabled")
	held, cont := 0, ""
	for {
		list := &fleet.ClusterList{}
		if err := r.List(ctx, list, client.Limit(500), client.Continue(cont)); err != nil {
			log.Error(err, "counting the Clusters held by Schedules")
			return
		}
		for i := range list.Items {
			if FlagsOf(&list.Items[i]) != (Flags{}) {
				held++
			}
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}
	if held > 0 {
		log.Info("Schedules are disabled; Clusters a Schedule flagged stay held (their bundles deploy nothing new): delete their Schedules, or enable Schedules, to release them", "heldClusters", held)
	}
}

// releaseDeleted handles a Schedule being deleted while Schedules are
// disabled: it clears the flags of its clusters (status.matchingClusters)
// that no other remaining Schedule of the namespace lists, then removes
// the finalizer. A failed write keeps the finalizer, and is retried.
type releaseDeleted struct{ client client.Client }

func (r *releaseDeleted) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &fleet.Schedule{}
	if err := r.client.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.DeletionTimestamp.IsZero() || !slices.Contains(s.Finalizers, Finalizer) {
		return ctrl.Result{}, nil
	}
	others := &fleet.ScheduleList{}
	if err := r.client.List(ctx, others, client.InNamespace(s.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	var errs []error
	for _, n := range releasedClusters(s, others.Items) {
		if err := patchFlags(ctx, r.client, s.Namespace, n, Flags{}); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", n, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, fmt.Errorf("schedule %s: keeping its finalizer: %w", s.Name, err)
	}
	return ctrl.Result{}, patchFinalizers(ctx, r.client, s, slices.DeleteFunc(slices.Clone(s.Finalizers), func(f string) bool { return f == Finalizer }))
}

// releasedClusters are the clusters of deleted (its
// status.matchingClusters) that no other Schedule not being deleted lists
// in its status.matchingClusters: those the disabled mode clears. Pure.
func releasedClusters(deleted *fleet.Schedule, all []fleet.Schedule) []string {
	kept := map[string]bool{}
	for i := range all {
		o := &all[i]
		if o.Name == deleted.Name || !o.DeletionTimestamp.IsZero() {
			continue
		}
		for _, n := range o.Status.MatchingClusters {
			kept[n] = true
		}
	}
	var out []string
	for _, n := range deleted.Status.MatchingClusters {
		if !kept[n] {
			out = append(out, n)
		}
	}
	return out
}
