package registration

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// apply creates or updates obj with server-side apply, so that the desired
// fields are ours and nothing else on the object is touched. It needs no
// read, which keeps Secrets, ServiceAccounts and RBAC out of the cache.
func apply(ctx context.Context, c client.Client, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	obj.SetResourceVersion("")
	obj.SetManagedFields(nil)
	//nolint:staticcheck // typed objects with client.Apply are what we need here.
	if err := c.Patch(ctx, obj, client.Apply, fieldOwner, client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// ensure creates obj, or applies it when it exists already (a retry, a
// re-registration, a namespace deleted by hand). A create costs the API
// server much less than an apply (no YAML decoding of the patch, no merge),
// and in a burst of new registrations nearly every write is a create.
func ensure(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Create(ctx, obj.DeepCopyObject().(client.Object), fieldOwner)
	switch {
	case err == nil:
		return nil
	case apierrors.IsAlreadyExists(err):
		return apply(ctx, c, obj)
	}
	return fmt.Errorf("creating %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
}

// ensureAll ensures objs concurrently (they must not depend on each other)
// and returns the first error. Concurrency is what makes a burst of
// registrations fast: each write waits for etcd, not for the CPU.
func ensureAll(ctx context.Context, c client.Client, objs []client.Object) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, o := range objs {
		g.Go(func() error { return ensure(ctx, c, o) })
	}
	return g.Wait()
}

// deleteAll deletes objs concurrently; NotFound is success.
func deleteAll(ctx context.Context, c client.Client, objs []client.Object) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, o := range objs {
		g.Go(func() error { return deleteIfExists(ctx, c, o) })
	}
	return g.Wait()
}

// deleteIfExists deletes obj and treats NotFound as success.
func deleteIfExists(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}
