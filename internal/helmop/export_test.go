package helmop

import (
	"context"
	"time"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// WriteStatus writes op's status as a reconcile does after a build of op's
// generation that ended with err (nil: built at version, not polled), op
// being the copy of the HelmOp the cache showed. The Bundle is read with
// r.Client.
func (r *Reconciler) WriteStatus(ctx context.Context, op *fleet.HelmOp, version string, err error) error {
	b, lerr := r.currentBundle(ctx, op)
	if lerr != nil {
		return lerr
	}
	var polled time.Time
	if t := op.Status.LastPollingTime; t != nil {
		polled = t.Time
	}
	return r.writeStatus(ctx, op, outcome{Err: err, Polled: polled, Version: version, Built: err == nil}, b)
}
