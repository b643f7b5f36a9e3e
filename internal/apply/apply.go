// Package apply writes Bundles to the manager cluster: it creates or updates
// each one (retrying on conflicts, and leaving unchanged bundles untouched),
// keeps their Helm values in a Secret rather than in the Bundle (values.go),
// and prunes bundles of the same origin that are no longer produced.
package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"time"

	"golang.org/x/sync/errgroup"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Options configure Apply.
type Options struct {
	// Namespace is where the bundles go when they name none.
	Namespace string
	// PruneSelector selects the Bundles in Namespace that belong to the same
	// origin (e.g. repo-name); those not in the applied set are deleted.
	// nil means no pruning.
	PruneSelector map[string]string
	// Reader reads the existing Bundles and their values Secrets
	// (default: the client). A manager passes an uncached reader: it does
	// not cache Secrets, and when sharded its cache holds only its own
	// shard's Bundles, while a GitRepo moved to it from another shard must
	// find (and relabel) the Bundles it already has.
	Reader client.Reader
	// Parallel is how many bundles are written at once (default
	// DefaultParallel). A repository of many paths then lands as one
	// change, not one bundle per round trip.
	Parallel int
}

// DefaultParallel is Options.Parallel when unset.
const DefaultParallel = 8

// Result says what Apply changed.
type Result struct {
	Created, Updated, Unchanged, Deleted []string
}

// Apply creates or updates bundles and prunes the stale ones. Nothing is
// pruned unless every bundle was written.
func Apply(ctx context.Context, c client.Client, bundles []*fleet.Bundle, opts Options) error {
	_, err := ApplyWithResult(ctx, c, bundles, opts)
	return err
}

// ApplyWithResult is Apply, reporting what changed, in the order of
// bundles. When writes fail, the error is the first failed bundle's (in
// that order) and the result lists only what was written.
func ApplyWithResult(ctx context.Context, c client.Client, bundles []*fleet.Bundle, opts Options) (*Result, error) {
	res := &Result{}
	keep := map[types.NamespacedName]bool{}
	desired := make([]*fleet.Bundle, len(bundles))
	for i, b := range bundles {
		desired[i] = b.DeepCopy()
		if desired[i].Namespace == "" {
			desired[i].Namespace = opts.Namespace
		}
		keep[client.ObjectKeyFromObject(desired[i])] = true
	}
	outcomes, errs := make([]outcome, len(desired)), make([]error, len(desired))
	reader := opts.Reader
	if reader == nil {
		reader = c
	}
	width := opts.Parallel
	if width <= 0 {
		width = DefaultParallel
	}
	// Every bundle is tried (errors are kept per bundle, not returned to
	// the group), so one failure does not stop the others.
	var g errgroup.Group
	g.SetLimit(width)
	for i, d := range desired {
		g.Go(func() error {
			outcomes[i], errs[i] = applyOne(ctx, c, reader, d)
			return nil
		})
	}
	_ = g.Wait()
	var firstErr error
	for i, d := range desired {
		if errs[i] != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("bundle %s/%s: %w", d.Namespace, d.Name, errs[i])
			}
			continue
		}
		switch outcomes[i] {
		case created:
			res.Created = append(res.Created, d.Name)
		case updated:
			res.Updated = append(res.Updated, d.Name)
		default:
			res.Unchanged = append(res.Unchanged, d.Name)
		}
	}
	if firstErr != nil {
		return res, firstErr
	}
	if opts.PruneSelector == nil {
		return res, nil
	}
	list := &fleet.BundleList{}
	if err := reader.List(ctx, list, client.InNamespace(opts.Namespace), client.MatchingLabels(opts.PruneSelector)); err != nil {
		return res, fmt.Errorf("listing bundles to prune: %w", err)
	}
	for i := range list.Items {
		b := &list.Items[i]
		if keep[client.ObjectKeyFromObject(b)] {
			continue
		}
		if err := c.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
			return res, fmt.Errorf("pruning bundle %s/%s: %w", b.Namespace, b.Name, err)
		}
		res.Deleted = append(res.Deleted, b.Name)
	}
	return res, nil
}

type outcome int

const (
	unchanged outcome = iota
	created
	updated
)

// conflictBackoff is more patient than retry.DefaultRetry (5 steps), so that
// several writers of one bundle (a GitOps job and a user's fleet apply) all
// get through; jitter spreads them apart.
var conflictBackoff = wait.Backoff{Steps: 30, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 1, Cap: 2 * time.Second}

func applyOne(ctx context.Context, c client.Client, reader client.Reader, desired *fleet.Bundle) (outcome, error) {
	// Helm values go to the Bundle's values Secret, the spec keeps their
	// hash (see ExtractValues). A Bundle given with a hash and no values
	// (one read back from the cluster, fleet apply -b) refers to the values
	// Secret it already has, which stays as it is.
	values, hash, err := ExtractValues(desired)
	if err != nil {
		return unchanged, err
	}
	if hash != "" {
		desired.Spec.ValuesHash = hash
	}
	result := unchanged
	changed := func() {
		if result == unchanged {
			result = updated
		}
	}
	// undo is the values Secret write that the Bundle's has not followed
	// yet: undone if the Bundle cannot be written (see undoValues).
	var undo *valuesWrite
	err = retry.RetryOnConflict(conflictBackoff, func() error {
		existing := &fleet.Bundle{}
		err := reader.Get(ctx, client.ObjectKeyFromObject(desired), existing)
		if apierrors.IsNotFound(err) {
			if values != nil {
				// A Secret of the bundle's name that is not a values
				// Secret stops the bundle before it exists: created, it
				// would wait for values that cannot be stored.
				if err := valuesSecretFree(ctx, reader, desired); err != nil {
					return err
				}
			}
			obj := desired.DeepCopy()
			obj.ResourceVersion = ""
			if err := c.Create(ctx, obj); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return apierrors.NewConflict(fleet.GroupVersion.WithResource("bundles").GroupResource(), desired.Name, err)
				}
				return err
			}
			result = created
			if values == nil {
				return nil
			}
			// The Secret is owned by the Bundle, so it can only come
			// second; meanwhile the manager waits for the values the
			// hash announces.
			_, err := writeValues(ctx, c, reader, obj, obj.Labels, values)
			return err
		}
		if err != nil {
			return err
		}
		if existing.DeletionTimestamp != nil {
			// Whatever is written now (Bundle or values) goes with the
			// Bundle when its finalizers are done, so success would be a
			// lie. Not a conflict to retry here: the deletion waits for
			// the Bundle's deployments to go. The GitRepo or HelmOp
			// retries later and then creates the Bundle afresh.
			return fmt.Errorf("%w since %s; it can be applied again once the deletion has completed",
				ErrBeingDeleted, existing.DeletionTimestamp.UTC().Format(time.RFC3339))
		}
		if want, have := origin(desired.Labels), origin(existing.Labels); want != "" && have != "" && want != have {
			// Two origins produced the same bundle name (repo "a" path
			// "b-c" and repo "a-b" path "c" both give "a-b-c"). Taking
			// the bundle over would redeploy it with the wrong content,
			// and the first origin's prune would later delete it.
			return fmt.Errorf("%w: the Bundle exists and belongs to %s, not %s; give one of them another name (fleet.yaml name:)", ErrOwnedByOther, have, want)
		}
		if values != nil {
			// The Secret first: when the manager sees the Bundle's new
			// hash, the values it names are already there. Its labels
			// are those the Bundle is written with.
			w, err := writeValues(ctx, c, reader, existing, desired.Labels, values)
			if err != nil {
				return err
			}
			if w != nil {
				changed()
				// Written again on a retry, the Secret had been
				// changed since the first write by another writer,
				// whose values (and Bundle) an undo must keep: the
				// undo goes back to what this write found.
				undo = w
			}
		}
		hadValues := existing.Spec.ValuesHash != ""
		annotations := maps.Clone(existing.Annotations)
		if annotations == nil && len(desired.Annotations) > 0 {
			annotations = map[string]string{}
		}
		maps.Copy(annotations, desired.Annotations)
		if !sameSpec(existing.Spec, desired.Spec) || !reflect.DeepEqual(nonNil(existing.Labels), nonNil(desired.Labels)) ||
			!reflect.DeepEqual(nonNil(existing.Annotations), nonNil(annotations)) {
			existing.Spec = desired.Spec
			existing.Labels = desired.Labels
			existing.Annotations = annotations
			if err := c.Update(ctx, existing); err != nil {
				return err
			}
			changed()
		}
		// The Bundle now names what the Secret holds.
		undo = nil
		if hadValues && desired.Spec.ValuesHash == "" {
			// No values any more: the Bundle no longer names the
			// Secret, which goes.
			deleted, err := deleteValues(ctx, c, reader, existing)
			if err != nil {
				return err
			}
			if deleted {
				changed()
			}
		}
		return nil
	})
	if err != nil && undo != nil {
		// The Bundle was refused (admission, validation, size) or the
		// retries ran out: its values Secret goes back to the values its
		// hash names, rather than leaving it waiting for values.
		if uerr := undoValues(ctx, c, reader, client.ObjectKeyFromObject(desired), undo); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}
	return result, err
}

// ErrBeingDeleted: the Bundle exists but is being deleted (it has a
// deletionTimestamp and finalizers still to run), so Apply leaves it alone.
// The error is temporary, not bad input: applying again after the deletion
// has completed creates the Bundle anew.
var ErrBeingDeleted = errors.New("the Bundle is being deleted")

// ErrOwnedByOther: the bundle name is taken by a bundle of another GitRepo
// or HelmOp. Apply leaves that bundle alone.
var ErrOwnedByOther = errors.New("bundle name taken")

// origin is the GitRepo or HelmOp label of a bundle ("key=value"), or ""
// for a bundle of no known origin (fleet apply without labels), which any
// origin may take over, as before.
func origin(labels map[string]string) string {
	for _, k := range []string{fleet.RepoLabel, fleet.HelmOpLabel} {
		if v := labels[k]; v != "" {
			return k + "=" + v
		}
	}
	return ""
}

// sameSpec compares specs through their JSON form, so that numbers in Helm
// values compare equal whatever Go type decoding gave them.
func sameSpec(a, b fleet.BundleSpec) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		return false
	}
	var va, vb interface{}
	if json.Unmarshal(ja, &va) != nil || json.Unmarshal(jb, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// DeleteBundles is the clean-up of a Bundle owner being deleted (a GitRepo,
// a HelmOp; see package finalizer): it deletes the Bundles of namespace
// that carry labels, and the targeting controller then removes their
// deployments, unless keepResources.
func DeleteBundles(ctx context.Context, c client.Client, namespace string, labels map[string]string) error {
	err := c.DeleteAllOf(ctx, &fleet.Bundle{}, client.InNamespace(namespace), client.MatchingLabels(labels))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// OwnerOf maps a Bundle to a reconcile request for the owner its label
// names (fleet.RepoLabel for GitRepos, fleet.HelmOpLabel for HelmOps), in
// the Bundle's namespace; a Bundle without the label maps to nothing.
func OwnerOf(label string) func(context.Context, client.Object) []reconcile.Request {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[label]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	}
}

// AllInNamespace maps any object to reconcile requests for every object of
// newList's kind in the object's namespace, read from c (the cache): a
// GitRepoRestriction or a Policy concerns every GitRepo or HelmOp of its
// namespace. A failed list maps to nothing.
func AllInNamespace(c client.Reader, newList func() client.ObjectList) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := newList()
		if err := c.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		_ = meta.EachListItem(list, func(item runtime.Object) error {
			if m, err := meta.Accessor(item); err == nil {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}})
			}
			return nil
		})
		return out
	}
}
