package schedule

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// namespaceOf is the queue item of o: its namespace.
func namespaceOf(_ context.Context, o client.Object) []ctrl.Request {
	return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace()}}}
}

// scheduledNamespace enqueues the namespace of o when it has a Schedule:
// a namespace without one has nothing a ClusterGroup could change.
func (r *Reconciler) scheduledNamespace() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []ctrl.Request {
		if !r.hasSchedule(ctx, o.GetNamespace()) {
			return nil
		}
		return namespaceOf(ctx, o)
	})
}

// clusterNamespace enqueues the namespace of a Cluster when it has a
// Schedule, and also when the Cluster carries a flag: flags no Schedule
// accounts for (set by Rancher Fleet, or left by a Schedule deleted
// before this controller saw it) are then cleared.
func (r *Reconciler) clusterNamespace() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []ctrl.Request {
		c, ok := o.(*fleet.Cluster)
		if !ok || (FlagsOf(c) == Flags{} && !r.hasSchedule(ctx, c.Namespace)) {
			return nil
		}
		return namespaceOf(ctx, o)
	})
}

func (r *Reconciler) hasSchedule(ctx context.Context, ns string) bool {
	list := &fleet.ScheduleList{}
	if err := r.Client.List(ctx, list, client.InNamespace(ns), client.Limit(1)); err != nil {
		// Unknown: look, rather than miss a change.
		return true
	}
	return len(list.Items) > 0
}

// clusterChanged passes Cluster events that can change a Schedule's
// answer: creation, deletion, labels (targets), and the flags themselves,
// so that flags another writer changed are put back. Heartbeats and
// status roll-ups pass nothing.
var clusterChanged = builder.WithPredicates(predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*fleet.Cluster), e.ObjectNew.(*fleet.Cluster)
		return !equality.Semantic.DeepEqual(o.Labels, n.Labels) || FlagsOf(o) != FlagsOf(n)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
})

// groupChanged passes ClusterGroup events that can change which clusters
// a target's clusterGroup or clusterGroupSelector selects.
var groupChanged = builder.WithPredicates(predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*fleet.ClusterGroup), e.ObjectNew.(*fleet.ClusterGroup)
		return !equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Spec.Selector, n.Spec.Selector)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
})
