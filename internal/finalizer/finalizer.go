// Package finalizer holds the one finalizer dance every owning reconciler
// does: clean up and release an object that is being deleted, or make sure
// the finalizer is present before creating anything the object owns.
package finalizer

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// Handle runs cleanup and removes the finalizer name when obj is being
// deleted; otherwise it adds the finalizer if missing. It returns deleting
// true when obj is going away, so the caller stops reconciling it. A cleanup
// error keeps the finalizer, so the deletion is retried.
func Handle(ctx context.Context, c client.Client, obj client.Object, name string, cleanup func(context.Context) error) (deleting bool, err error) {
	if !obj.GetDeletionTimestamp().IsZero() {
		if !controllerutil.ContainsFinalizer(obj, name) {
			return true, nil
		}
		if err := cleanup(ctx); err != nil {
			return true, err
		}
		controllerutil.RemoveFinalizer(obj, name)
		return true, client.IgnoreNotFound(c.Update(ctx, obj))
	}
	if controllerutil.AddFinalizer(obj, name) {
		return false, c.Update(ctx, obj)
	}
	return false, nil
}
