package bundledeployment

import (
	"context"
	"errors"
)

// Collect runs one garbage collection pass of every reconciler started in
// this test binary, as the periodic collector does, so that a test can
// look at what one pass did instead of waiting for the next one.
func Collect(ctx context.Context) error {
	startedMu.Lock()
	rs := append([]*Reconciler(nil), started...)
	startedMu.Unlock()
	var errs []error
	for _, r := range rs {
		errs = append(errs, r.collect(ctx))
	}
	return errors.Join(errs...)
}
