package statuswrite

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MaxAttempts bounds the re-reads after conflicts in one reconcile; past it
// the error goes back to the work queue, which retries later.
const MaxAttempts = 5

// Options are what Write needs to know of one kind and one reconcile.
type Options[T client.Object] struct {
	// Versions records this process's status writes of the kind.
	Versions *Versions
	// Compute derives the status into cur, a deep copy of the object read
	// (from the cache at first, from the API server after a re-read). It
	// must depend only on cur and on what the reconcile learned, so that
	// computed again on a fresh copy it is right for that copy.
	Compute func(cur T)
	// Equal says whether a and b have the same status.
	Equal func(a, b T) bool
	// Patch writes cur's status over base; PatchStatus is the one to use.
	Patch func(ctx context.Context, cur, base T) error
	// Get reads the object from the API server, bypassing the cache;
	// ReadLive is the one to use.
	Get func(ctx context.Context, key client.ObjectKey) (T, error)
	// Written, when set, is told of each status written, with the copy it
	// replaced: what it records (Events) then follows the status actually
	// stored, however stale the cache was.
	Written func(before, after T)
}

// Write derives the status of obj and writes it when it differs from the
// stored one; an object gone meanwhile is no error.
//
// The cache may not yet hold this process's previous status write, and
// watches ignore status-only updates, so no later event would correct a
// status left stale. Hence:
//   - a status equal to a cached copy that may predate the last write
//     (Versions.SkipEqual) is compared with the API server's copy before
//     the write is skipped;
//   - the patch carries an optimistic lock: made against a stale copy it
//     would leave out the fields equal there, however different they are
//     in the stored status. It conflicts instead, and the status is
//     derived again from the API server's copy, up to MaxAttempts times.
func Write[T client.Object](ctx context.Context, obj T, o Options[T]) error {
	key := client.ObjectKeyFromObject(obj)
	fresh := false
	for attempt := 1; ; attempt++ {
		cur := obj.DeepCopyObject().(T)
		o.Compute(cur)
		if o.Equal(obj, cur) {
			if o.Versions.SkipEqual(key, obj.GetResourceVersion(), fresh) {
				return nil
			}
		} else {
			err := o.Patch(ctx, cur, obj)
			switch {
			case err == nil:
				o.Versions.Wrote(key, cur.GetResourceVersion())
				if o.Written != nil {
					o.Written(obj, cur)
				}
				return nil
			case apierrors.IsNotFound(err):
				return nil
			case !apierrors.IsConflict(err) || attempt >= MaxAttempts:
				return err
			}
		}
		live, err := o.Get(ctx, key)
		if err != nil {
			return client.IgnoreNotFound(err)
		}
		obj, fresh = live, true
	}
}

// PatchStatus patches cur's status over base with an optimistic lock (see
// Write for why), leaving in cur the object stored.
func PatchStatus[T client.Object](c client.StatusClient) func(ctx context.Context, cur, base T) error {
	return func(ctx context.Context, cur, base T) error {
		return c.Status().Patch(ctx, cur, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
}

// ReadLive reads objects into newObj's from r, which must be the API
// server's reader rather than the cache: a re-read must see what a conflict
// or the last write left.
func ReadLive[T client.Object](r client.Reader, newObj func() T) func(ctx context.Context, key client.ObjectKey) (T, error) {
	return func(ctx context.Context, key client.ObjectKey) (T, error) {
		obj := newObj()
		err := r.Get(ctx, key, obj)
		return obj, err
	}
}
