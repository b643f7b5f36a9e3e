package bundle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// IndexBDDownstream maps a BundleDeployment to
// "<bundle-namespace>/<kind>/<name>" of every Secret/ConfigMap named in its
// downstreamResources (current and staged), so that a change of such a
// source re-reconciles exactly the bundles that copy it.
const IndexBDDownstream = "targeting.bd.downstream"

// ErrDownstreamSource is returned when a Secret/ConfigMap named in
// downstreamResources does not exist in the Bundle's namespace, or is a
// Secret that may not leave it (see downstreamRefusal, credentialSecrets).
// It is bad input for that target only: the Bundle status says so, nothing
// but the copy of a refused Secret is deleted, and creating the source (a
// watched event) or naming another one fixes it.
var ErrDownstreamSource = errors.New("downstreamResources source missing")

// downstreamRefs lists the downstream resources of a BundleDeployment's
// current and staged options (kind lower-cased), without duplicates.
func downstreamRefs(bd *fleet.BundleDeployment) []fleet.DownstreamResource {
	var out []fleet.DownstreamResource
	for _, list := range [][]fleet.DownstreamResource{bd.Spec.Options.DownstreamResources, bd.Spec.StagedOptions.DownstreamResources} {
		for _, dr := range list {
			dr.Kind = strings.ToLower(dr.Kind)
			if dr.Name != "" && !slices.Contains(out, dr) {
				out = append(out, dr)
			}
		}
	}
	return out
}

// DownstreamKeysOf are the IndexBDDownstream values of a BundleDeployment.
func DownstreamKeysOf(bd *fleet.BundleDeployment) []string {
	ns := bd.Labels[fleet.BundleNamespaceLabel]
	if ns == "" {
		return nil
	}
	var out []string
	for _, dr := range downstreamRefs(bd) {
		out = append(out, ns+"/"+dr.Kind+"/"+dr.Name)
	}
	return out
}

// downstreamSourceHandler maps a Secret/ConfigMap event (metadata only: the
// manager never caches Secret payloads) to the bundles copying it.
func (r *Reconciler) downstreamSourceHandler(kind string) handler.EventHandler {
	enqueue := func(ctx context.Context, o client.Object, q queue) {
		if o.GetLabels()[fleet.BundleInternalSecretLbl] == "true" {
			return // our own copies
		}
		bds := &fleet.BundleDeploymentList{}
		key := o.GetNamespace() + "/" + kind + "/" + o.GetName()
		if err := r.List(ctx, bds, client.MatchingFields{IndexBDDownstream: key}); err != nil {
			return
		}
		for i := range bds.Items {
			if rq, ok := reqForKey(BundleKeyOf(&bds.Items[i])); ok {
				q.Add(rq)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) { enqueue(ctx, e.Object, q) },
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			if e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion() {
				enqueue(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) { enqueue(ctx, e.Object, q) },
	}
}

// copyLabels mark the copies as Fleet internal objects.
func copyLabels() map[string]string {
	return map[string]string{fleet.BundleInternalSecretLbl: "true", fleet.ManagedLabel: "true"}
}

// syncDownstreamResources copies the Secrets/ConfigMaps named in the
// deployment's downstreamResources from the Bundle's namespace into the
// cluster namespace, where the agent reads them. It reports whether any copy
// was created or changed, so that the caller bumps
// spec.downstreamResourcesGeneration and the agent redeploys. Copies are
// owned by the BundleDeployment once it exists (cached != nil). Reads are
// uncached GETs: the manager does not cache Secret payloads.
func (r *Reconciler) syncDownstreamResources(ctx context.Context, b *fleet.Bundle, bd, cached *fleet.BundleDeployment) (bool, error) {
	changed := false
	var missing []string
	// creds holds the credential Secrets of the Bundle's namespace, read
	// once a Secret needs checking.
	var creds map[string]string
	for _, dr := range downstreamRefs(bd) {
		var src, dst client.Object
		switch dr.Kind {
		case "secret":
			src, dst = &corev1.Secret{}, &corev1.Secret{}
		case "configmap":
			src, dst = &corev1.ConfigMap{}, &corev1.ConfigMap{}
		default:
			// The CRD enum refuses other kinds; the agent reports it too.
			missing = append(missing, fmt.Sprintf("unsupported kind %q for %s", dr.Kind, dr.Name))
			continue
		}
		if dr.Kind == "secret" && dr.Name == bd.Name {
			// That name is the deployment's values Secret (contract 5).
			missing = append(missing, fmt.Sprintf("secret %s clashes with the values Secret of the bundle", dr.Name))
			continue
		}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: dr.Name}, src); err != nil {
			if apierrors.IsNotFound(err) {
				missing = append(missing, fmt.Sprintf("%s %s/%s not found", dr.Kind, b.Namespace, dr.Name))
				continue
			}
			return changed, err
		}
		key := client.ObjectKey{Namespace: bd.Namespace, Name: dr.Name}
		if s, ok := src.(*corev1.Secret); ok {
			why := downstreamRefusal(s)
			if why == "" {
				if creds == nil {
					var err error
					if creds, err = r.passCredentialSecrets(ctx, b.Namespace); err != nil {
						return changed, err
					}
				}
				why = creds[dr.Name]
			}
			if why != "" {
				// Refused: a copy made before (by an older manager, or
				// before a GitRepo named the Secret) goes too, so that it
				// no longer sits where the agent can read it.
				missing = append(missing, fmt.Sprintf("secret %s/%s may not be copied to clusters: %s", b.Namespace, dr.Name, why))
				if cached != nil && cached.UID != "" {
					if err := r.releaseCopy(ctx, &corev1.Secret{}, key, cached.UID); err != nil {
						return changed, err
					}
				}
				continue
			}
		}
		err := r.APIReader.Get(ctx, key, dst)
		if err != nil && !apierrors.IsNotFound(err) {
			return changed, err
		}
		exists := err == nil
		if exists && dst.GetLabels()[fleet.BundleInternalSecretLbl] != "true" {
			missing = append(missing, fmt.Sprintf("%s %s/%s exists and is not a Fleet copy", dr.Kind, key.Namespace, key.Name))
			continue
		}
		before := dst.DeepCopyObject().(client.Object)
		dst.SetNamespace(key.Namespace)
		dst.SetName(key.Name)
		lbls := dst.GetLabels()
		if lbls == nil {
			lbls = map[string]string{}
		}
		maps.Copy(lbls, copyLabels())
		dst.SetLabels(lbls)
		if cached != nil && cached.UID != "" {
			addOwner(dst, cached)
		}
		contentChanged := copyData(src, dst)
		switch {
		case !exists:
			if err := r.Create(ctx, dst); err != nil {
				return changed, fmt.Errorf("copying %s %s to %s: %w", dr.Kind, dr.Name, key.Namespace, err)
			}
			changed = true
		case !equality.Semantic.DeepEqual(before, dst):
			if err := r.Update(ctx, dst); err != nil {
				return changed, fmt.Errorf("updating copy of %s %s in %s: %w", dr.Kind, dr.Name, key.Namespace, err)
			}
			changed = changed || contentChanged
		}
	}
	if len(missing) > 0 {
		return changed, fmt.Errorf("%w: %s", ErrDownstreamSource, strings.Join(missing, "; "))
	}
	return changed, nil
}

// copyData copies the payload of src into dst and tells whether it changed.
func copyData(src, dst client.Object) bool {
	switch s := src.(type) {
	case *corev1.Secret:
		d := dst.(*corev1.Secret)
		same := d.Type == s.Type && equality.Semantic.DeepEqual(d.Data, s.Data)
		d.Type, d.Data = s.Type, s.Data
		return !same
	case *corev1.ConfigMap:
		d := dst.(*corev1.ConfigMap)
		same := equality.Semantic.DeepEqual(d.Data, s.Data) && equality.Semantic.DeepEqual(d.BinaryData, s.BinaryData)
		d.Data, d.BinaryData = s.Data, s.BinaryData
		return !same
	}
	return false
}

func addOwner(o client.Object, bd *fleet.BundleDeployment) {
	refs := o.GetOwnerReferences()
	for _, ref := range refs {
		if ref.UID == bd.UID {
			return
		}
	}
	o.SetOwnerReferences(append(refs, metav1.OwnerReference{
		APIVersion: fleet.GroupVersion.String(), Kind: "BundleDeployment", Name: bd.Name, UID: bd.UID,
	}))
}

// deleteDownstreamCopies removes a deleted BundleDeployment from the owners
// of its copies and deletes the copies nobody else owns (the garbage
// collector would too, but it does not run everywhere, e.g. envtest).
func (r *Reconciler) deleteDownstreamCopies(ctx context.Context, bd *fleet.BundleDeployment) error {
	for _, dr := range downstreamRefs(bd) {
		var o client.Object
		switch dr.Kind {
		case "secret":
			o = &corev1.Secret{}
		case "configmap":
			o = &corev1.ConfigMap{}
		default:
			continue
		}
		if err := r.releaseCopy(ctx, o, client.ObjectKey{Namespace: bd.Namespace, Name: dr.Name}, bd.UID); err != nil {
			return fmt.Errorf("cleaning up copy of %s %s/%s: %w", dr.Kind, bd.Namespace, dr.Name, err)
		}
	}
	return nil
}

// releaseCopy removes the deployment of UID uid from the owners of the
// Fleet copy o at key, and deletes the copy when nobody else owns it. An
// object there that is not a Fleet copy is left alone.
func (r *Reconciler) releaseCopy(ctx context.Context, o client.Object, key client.ObjectKey, uid types.UID) error {
	if err := r.APIReader.Get(ctx, key, o); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if o.GetLabels()[fleet.BundleInternalSecretLbl] != "true" {
		return nil
	}
	refs := slices.DeleteFunc(o.GetOwnerReferences(), func(ref metav1.OwnerReference) bool { return ref.UID == uid })
	var err error
	if len(refs) == 0 {
		err = r.Delete(ctx, o, client.Preconditions{ResourceVersion: ptr(o.GetResourceVersion())})
	} else if len(refs) != len(o.GetOwnerReferences()) {
		o.SetOwnerReferences(refs)
		err = r.Update(ctx, o)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
