package bundle

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/kubeclient"
)

// Deletion works from the cache, which can lag behind the API server: it
// may still show a Bundle that is gone, or not yet show one created again
// under the same name. A BundleDeployment records its Bundle by name only
// (labels, no UID), so deleting "the deployments of ns/name" on the word
// of a stale cache would delete the new Bundle's, and every agent would
// uninstall the workload and install it again. So each deletion path first
// reads the Bundle from the API server (metadata only, and only on these
// paths, never on an ordinary pass), and the finalizer's removal is
// guarded by the resourceVersion the cache showed.

// replacedRetry is when to look again at a Bundle name whose live object
// is not the one the cache shows. The new object's create event requeues
// it as soon as the cache catches up; this is only a safety net.
const replacedRetry = 5 * time.Second

// liveBundle reads the Bundle key's metadata from the API server, nil when
// there is none.
func (r *Reconciler) liveBundle(ctx context.Context, key types.NamespacedName) (*metav1.PartialObjectMetadata, error) {
	live := kubeclient.MetadataOf(fleet.GroupVersion.WithKind("Bundle"))
	if err := r.APIReader.Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return live, nil
}

// gone handles a Bundle the cache no longer has.
func (r *Reconciler) gone(ctx context.Context, key types.NamespacedName) (ctrl.Result, error) {
	r.forgetBundle(key)
	live, err := r.liveBundle(ctx, key)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.orphaned(ctx, key, live)
}

// orphaned removes what a Bundle that is gone left under its name, live
// being what the API server now has under that name (nil: nothing).
//
// Only when the name is free is everything left under it the old Bundle's.
// A live Bundle this shard's cache selects (inShard) under the name is one
// created again that the cache does not show yet: what carries the name
// may already be its own, so nothing is deleted and the name is looked at
// again. One of another shard (or of none) is left alone, nothing deleted
// and nothing requeued: when it has moved there with its GitRepo, that
// shard adopts the deployments (putDeployment).
func (r *Reconciler) orphaned(ctx context.Context, key types.NamespacedName, live *metav1.PartialObjectMetadata) (ctrl.Result, error) {
	switch {
	case live == nil:
		// Gone without our finalizer (or after it): nothing may stay.
		if _, err := r.deleteDeployments(ctx, key.Namespace+"/"+key.Name, nil); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.deleteValuesSecret(ctx, key, "")
	case !inShard(live.GetLabels(), r.Opts.ShardID):
		return ctrl.Result{}, nil
	default:
		return ctrl.Result{RequeueAfter: jitter(replacedRetry)}, nil
	}
}

// inShard reports whether labels put a Bundle in the cache of shard id,
// with the selector the manager's cache uses (manager.ShardSelector, which
// imports this package): labelled with id, or, for the unsharded replica,
// not labelled at all. A Bundle whose shard label is empty is no replica's:
// read as the unsharded replica's, it would be looked at again forever,
// never to show up in the cache. The manager's
// TestBundleInShardAgreesWithShardSelector holds the two to one rule.
func inShard(lbls map[string]string, id string) bool {
	op, vals := selection.Equals, []string{id}
	if id == "" {
		op, vals = selection.DoesNotExist, nil
	}
	req, err := labels.NewRequirement(fleet.ShardLabel, op, vals)
	if err != nil {
		// An id no label can carry: no Bundle is in its cache.
		return false
	}
	return labels.NewSelector().Add(*req).Matches(labels.Set(lbls))
}

// InShard is inShard for the manager's test that holds it to
// manager.ShardSelector: manager imports this package, so this package
// cannot use the selector itself, and only that test keeps the two equal.
func InShard(id string, lbls map[string]string) bool {
	return inShard(lbls, id)
}

// forgetBundle drops everything the reconciler remembers of a Bundle it no
// longer has: deleted, or moved to another shard (which never reconciles
// it here again, so nothing else would). Without it each such Bundle left
// its status-write times and its deployments' write records behind for the
// life of the process. The deployments' records are found by the Bundle
// they name: this path is rare, so a scan of written is cheap enough.
func (r *Reconciler) forgetBundle(key types.NamespacedName) {
	r.values.Delete(key)
	r.invalidReported.Delete(key)
	r.statusWritten.Delete(key)
	r.statusUnsure.Delete(key)
	bundleKey := key.Namespace + "/" + key.Name
	r.written.Range(func(k, v any) bool {
		if w, ok := v.(writtenAt); ok && w.Bundle == bundleKey {
			r.written.Delete(k)
		}
		return true
	})
}

// finalize deletes a Bundle's deployments and values Secret, then lets it
// go. b is the cache's copy; it is acted on only while the API server
// still has that very object (same UID).
func (r *Reconciler) finalize(ctx context.Context, b *fleet.Bundle) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(b)
	live, err := r.liveBundle(ctx, key)
	if err != nil {
		return ctrl.Result{}, err
	}
	if live == nil || live.GetUID() != b.UID {
		// b is already gone; the name may be another Bundle's by now.
		r.forgetBundle(key)
		return r.orphaned(ctx, key, live)
	}
	remaining, err := r.deleteDeployments(ctx, b.Namespace+"/"+b.Name, nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	if remaining > 0 {
		// The cache has not seen the deletions yet; the delete events
		// requeue us.
		return ctrl.Result{RequeueAfter: jitter(5 * time.Second)}, nil
	}
	// Its values go with it, as its deployments do, whether or not a
	// garbage collector runs.
	if err := r.deleteValuesSecret(ctx, key, b.UID); err != nil {
		return ctrl.Result{}, err
	}
	r.values.Delete(key)
	r.invalidReported.Delete(key)
	if controllerutil.ContainsFinalizer(b, Finalizer) {
		done, err := r.removeFinalizer(ctx, b)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !done {
			return ctrl.Result{RequeueAfter: jitter(time.Second)}, nil
		}
	}
	r.statusWritten.Delete(key)
	r.statusUnsure.Delete(key)
	return ctrl.Result{}, nil
}

// removeFinalizer removes the finalizer from b under the resourceVersion
// the cache showed: a patch by name alone could strip it from a Bundle
// created again under the name since the check in finalize. done is false
// on a conflict, when the Bundle changed (or was replaced) meanwhile and
// must be looked at again.
func (r *Reconciler) removeFinalizer(ctx context.Context, b *fleet.Bundle) (done bool, err error) {
	patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(b, Finalizer)
	err = r.Patch(ctx, b, patch)
	switch {
	case apierrors.IsConflict(err):
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	return true, nil
}
