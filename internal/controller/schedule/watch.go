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

// namespaceSchedules enqueues every Schedule of the changed object's
// namespace: each one recomputes the flags of the whole namespace.
func (r *Reconciler) namespaceSchedules() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []ctrl.Request {
		list := &fleet.ScheduleList{}
		if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		reqs := make([]ctrl.Request, 0, len(list.Items))
		for _, s := range list.Items {
			reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
		}
		return reqs
	})
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
