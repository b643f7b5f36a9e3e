package bundledeployment

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/types"
)

// Cleanup runs the clean-up of the BundleDeployment namespace/name, gone,
// in every reconciler started in this test binary, as a reconcile queued
// before its deletion (the periodic resync) does once more after it.
func Cleanup(ctx context.Context, namespace, name string) error {
	startedMu.Lock()
	rs := append([]*Reconciler(nil), started...)
	startedMu.Unlock()
	key := types.NamespacedName{Namespace: namespace, Name: name}
	var errs []error
	for _, r := range rs {
		unlock := r.lock(key)
		errs = append(errs, r.cleanup(ctx, key))
		unlock()
	}
	return errors.Join(errs...)
}
