package controller

import (
	"context"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// WriteStatus lets the tests write the status of a reconcile that started
// from repo (possibly a stale copy) and whose sync failed with syncErr (nil:
// it worked), exactly as Reconcile does after pollAndSync.
func (r *Reconciler) WriteStatus(ctx context.Context, repo *fleet.GitRepo, syncErr error) error {
	out := syncOutcome{}
	if syncErr != nil {
		out = syncOutcome{SyncErr: syncErr, SyncReason: ReasonBuildFailed, Stalled: true}
	}
	return r.writeStatus(ctx, repo, out, syncedFields{})
}
