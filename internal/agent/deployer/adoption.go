package deployer

// Adoption: which objects that exist downstream a deploy makes its
// release's, beyond what Helm accepts without helm.takeOwnership.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// Helm's ownership metadata of a release's objects.
const (
	managedByLabel          = "app.kubernetes.io/managed-by"
	releaseNameAnnotation   = "meta.helm.sh/release-name"
	releaseNSAnnotation     = "meta.helm.sh/release-namespace"
	helmHookAnnotation      = "helm.sh/hook"
	helmOwnershipConflictIs = "exists and cannot be imported into the current release"
)

// releaseID names a Helm release.
type releaseID struct{ namespace, name string }

func (r releaseID) String() string { return r.namespace + "/" + r.name }

// adoptVerdict is what a deploy does with an object that exists.
type adoptVerdict int

const (
	// ownedAlready: it carries the release's ownership; Helm takes it.
	ownedAlready adoptVerdict = iota
	// adoptObject: the deploy marks it as the release's first.
	adoptObject
	// refuseObject: another release's, or nobody's at a first install.
	refuseObject
)

// adoptFacts are what adoption decides by: the object as it exists, and
// the deploy.
type adoptFacts struct {
	labels, annotations map[string]string
	// controller names the object's controller ownerReference ("Kind
	// name"), empty when it has none.
	controller string
	// clusterScoped: the object is not in a namespace (a Namespace, a
	// ClusterRole, a StorageClass).
	clusterScoped bool
	// upgrade: the release exists; ownEarlier: the object's ownership
	// names a release this BundleDeployment deployed before.
	upgrade, ownEarlier bool
}

// adoption decides what a deploy of release target, for BundleDeployment
// bdName, does with an object that exists, and why it refuses. Helm
// accepts only an object that already carries target's ownership. Beyond
// that the agent adopts:
//   - an object whose ownership names a release that this same
//     BundleDeployment deployed before (ownEarlier: it changed its
//     helm.releaseName or namespace; that release is removed once the new
//     one is deployed, and its uninstall leaves objects that now name
//     another release);
//   - at an upgrade, a namespaced object that names no release at all, as
//     Rancher Fleet's upgrade (which always takes ownership) does; a first
//     install does not, as Helm and Rancher Fleet do not.
//
// Uninstalling the release deletes what it adopted, so it never adopts an
// object someone else keeps: another release's, another
// BundleDeployment's (a downstreamResources copy, labelled with its name),
// one a controller owns, nor a cluster-scoped object of no release (a
// Namespace holds other releases and objects, and goes with them; others
// serve the whole cluster). Only helm.takeOwnership takes those (Helm then
// adopts everything). An object of an earlier release of this same
// BundleDeployment is none of those, whatever labels or ownerReferences
// were added to it since: it is this BundleDeployment's already, and the
// earlier release's uninstall would delete it just as the new release's
// will; refusing it would fail every deploy after a rename. CRDs are
// applyCRDs' concern, not adoption's.
func adoption(f adoptFacts, target releaseID, bdName string) (adoptVerdict, string) {
	owner := releaseID{namespace: f.annotations[releaseNSAnnotation], name: f.annotations[releaseNameAnnotation]}
	const take = "; set helm.takeOwnership to adopt it"
	if owner == target && f.labels[managedByLabel] == "Helm" {
		return ownedAlready, ""
	}
	if f.ownEarlier {
		return adoptObject, ""
	}
	if bd := f.labels[fleet.BundleDeploymentLabel]; bd != "" && bd != bdName && bd != names.Limit(bdName, maxLabelValue) {
		return refuseObject, fmt.Sprintf("it is labelled %s=%s, a copy made for another BundleDeployment (downstreamResources)%s",
			fleet.BundleDeploymentLabel, bd, take)
	}
	if f.controller != "" {
		return refuseObject, "it is controlled by " + f.controller + " (a controller ownerReference)" + take
	}
	switch {
	case owner == target:
		return adoptObject, ""
	case owner == releaseID{} && !f.upgrade:
		return refuseObject, "it carries no Helm release ownership, and a first install adopts such an object only with helm.takeOwnership"
	case owner == releaseID{} && f.clusterScoped:
		return refuseObject, "it carries no Helm release ownership and is cluster-scoped (uninstalling the release would delete it, and a Namespace everything in it)" + take
	case owner == releaseID{}:
		return adoptObject, ""
	}
	return refuseObject, "it belongs to Helm release " + owner.String() + take
}

// isOwnershipConflict reports Helm refusing an install or upgrade because
// an object it would create exists without the release's ownership. Helm
// checks that before it writes anything (storage, hooks, objects), so the
// action can be run again once the objects are adopted.
func isOwnershipConflict(err error) bool {
	return err != nil && strings.Contains(err.Error(), helmOwnershipConflictIs)
}

// adopter adopts the objects of one deploy (see adoption).
type adopter struct {
	d      *Deployer
	dyn    dynamic.Interface
	mapper meta.RESTMapper
	// target is the release deployed, for BundleDeployment bdName.
	target  releaseID
	bdName  string
	upgrade bool
	// known are the objects the release holds already (its last
	// manifest): Helm does not check them.
	known map[objectKey]bool
	// earlier remembers which releases ownEarlier looked up.
	earlier map[releaseID]bool
	// marked are the objects adopt marked, as they were before.
	marked []*unstructured.Unstructured
}

// objectKey is what Helm compares objects of two manifests by.
type objectKey struct {
	gk              schema.GroupKind
	namespace, name string
}

func keyOf(o *unstructured.Unstructured) objectKey {
	return objectKey{gk: o.GroupVersionKind().GroupKind(), namespace: o.GetNamespace(), name: o.GetName()}
}

// adopt marks the rendered objects the deploy may adopt as owned by the
// release, under the resourceVersion read (an object changed meanwhile
// fails the deploy, which is retried). When any object is refused nothing
// is marked and the error names the refused objects. It returns how many
// objects it marked (a.marked). Hooks and CRDs are not its concern: Helm
// does not check hooks, and the agent applies CRDs itself (applyCRDs).
func (a *adopter) adopt(ctx context.Context, rendered []*unstructured.Unstructured) (int, error) {
	var todo []*unstructured.Unstructured
	var refused []string
	for _, o := range rendered {
		if o.GetAnnotations()[helmHookAnnotation] != "" || o.GroupVersionKind().GroupKind() == crdGK || a.known[keyOf(o)] {
			continue
		}
		live, err := a.get(ctx, o)
		if err != nil {
			return 0, err
		}
		if live == nil {
			continue
		}
		v, reason, err := a.verdict(ctx, live)
		if err != nil {
			return 0, err
		}
		switch v {
		case adoptObject:
			todo = append(todo, live)
		case refuseObject:
			refused = append(refused, describe(live)+" "+helmOwnershipConflictIs+": "+reason)
		}
	}
	if len(refused) > 0 {
		return 0, errors.New(strings.Join(refused[:min(len(refused), 3)], "; "))
	}
	for _, live := range todo {
		if err := a.mark(ctx, live); err != nil {
			return len(a.marked), err
		}
		a.marked = append(a.marked, live)
	}
	return len(a.marked), nil
}

// verdict is adoption for live, with the reason of a refusal.
func (a *adopter) verdict(ctx context.Context, live *unstructured.Unstructured) (adoptVerdict, string, error) {
	ann := live.GetAnnotations()
	owner := releaseID{namespace: ann[releaseNSAnnotation], name: ann[releaseNameAnnotation]}
	ownEarlier := false
	if owner != a.target && owner.name != "" && owner.namespace != "" {
		var err error
		if ownEarlier, err = a.ownEarlier(ctx, owner); err != nil {
			return 0, "", err
		}
	}
	facts := adoptFacts{
		labels: live.GetLabels(), annotations: ann, clusterScoped: !a.namespaced(live),
		upgrade: a.upgrade, ownEarlier: ownEarlier,
	}
	if c := metav1.GetControllerOf(live); c != nil {
		facts.controller = c.Kind + " " + c.Name
	}
	v, reason := adoption(facts, a.target, a.bdName)
	return v, reason, nil
}

// ownEarlier reports whether release r's latest revision the agent wrote
// records a.bdName: a release this BundleDeployment deployed before. It
// is read as the agent's own identity, as ReleaseOwner reads.
func (a *adopter) ownEarlier(ctx context.Context, r releaseID) (bool, error) {
	if v, ok := a.earlier[r]; ok {
		return v, nil
	}
	sig, err := a.d.signer(ctx)
	if err != nil {
		return false, err
	}
	store := newReleaseStore(newReleaseSecrets(a.d.core.Secrets(r.namespace)))
	store.sig, store.namespace = sig, r.namespace
	store.SetLogger(slog.DiscardHandler)
	last, err := a.d.lastRelease(&action.Configuration{Releases: storage.Init(store)}, r.name)
	if err != nil {
		return false, fmt.Errorf("reading release %s, which owns an object of release %s: %w", r, a.target, err)
	}
	own := last != nil && otherOwner(last, a.bdName) == "" &&
		(chartBundleID(last) != "" || last.Labels[StorageBundleIDLabel] != "")
	if a.earlier == nil {
		a.earlier = map[releaseID]bool{}
	}
	a.earlier[r] = own
	return own, nil
}

// get reads o live as the deploying identity; nil when it does not exist
// or its kind does not map (Helm reports that).
func (a *adopter) get(ctx context.Context, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	res, ok := a.resource(o)
	if !ok {
		return nil, nil
	}
	live, err := res.Get(ctx, o.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s to check its ownership: %w", describe(o), err)
	}
	return live, nil
}

// namespaced reports whether o's kind is namespaced (its mapping is known:
// adopt read it).
func (a *adopter) namespaced(o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil && m.Scope.Name() == meta.RESTScopeNameNamespace
}

func (a *adopter) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, bool) {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, false
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), true
	}
	return a.dyn.Resource(m.Resource), true
}

// mark gives live the release's ownership metadata, as Helm would.
func (a *adopter) mark(ctx context.Context, live *unstructured.Unstructured) error {
	res, ok := a.resource(live)
	if !ok {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": live.GetResourceVersion(),
		"labels":          map[string]string{managedByLabel: "Helm"},
		"annotations":     map[string]string{releaseNameAnnotation: a.target.name, releaseNSAnnotation: a.target.namespace},
	}})
	if err != nil {
		return err
	}
	_, err = res.Patch(ctx, live.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("adopting %s into release %s: %w", describe(live), a.target, err)
	}
	return nil
}

// unmark gives the objects adopt marked back the ownership metadata they
// had, each where it still carries the marks: a deploy that stored no
// revision would otherwise leave them naming a release that does not
// exist, which nothing uninstalls, and the uninstall of the release they
// came from (a renamed one) would skip them.
func (a *adopter) unmark(ctx context.Context) error {
	var errs []error
	for _, prev := range a.marked {
		errs = append(errs, a.unmarkOne(ctx, prev))
	}
	return errors.Join(errs...)
}

func (a *adopter) unmarkOne(ctx context.Context, prev *unstructured.Unstructured) error {
	res, ok := a.resource(prev)
	if !ok {
		return nil
	}
	live, err := res.Get(ctx, prev.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s to undo its adoption into release %s: %w", describe(prev), a.target, err)
	}
	ann := live.GetAnnotations()
	if live.GetUID() != prev.GetUID() || ann[releaseNameAnnotation] != a.target.name || ann[releaseNSAnnotation] != a.target.namespace {
		return nil
	}
	// The value prev had, or null to remove the key.
	was := func(m map[string]string, k string) any {
		if v, ok := m[k]; ok {
			return v
		}
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": live.GetResourceVersion(),
		"labels":          map[string]any{managedByLabel: was(prev.GetLabels(), managedByLabel)},
		"annotations": map[string]any{
			releaseNameAnnotation: was(prev.GetAnnotations(), releaseNameAnnotation),
			releaseNSAnnotation:   was(prev.GetAnnotations(), releaseNSAnnotation),
		},
	}})
	if err != nil {
		return err
	}
	_, err = res.Patch(ctx, live.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("undoing the adoption of %s into release %s: %w", describe(prev), a.target, err)
	}
	return nil
}

// describe names an object in messages.
func describe(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// knownObjects are the objects of a release manifest, by objectKey.
func knownObjects(manifest string) (map[objectKey]bool, error) {
	objs, err := decodeAll([]byte(manifest))
	if err != nil {
		return nil, err
	}
	out := make(map[objectKey]bool, len(objs))
	for _, o := range objs {
		out[keyOf(o)] = true
	}
	return out, nil
}

// applyBundleCRDs applies the bundle's CRDs for release target (applyCRDs).
// Without takeOwnership applyCRDs refuses a CRD another release owns; one
// that this BundleDeployment's earlier release owns (adoption) is taken,
// as the release's other objects are: those are applied taking ownership,
// the rest as before. The CRDs are read again only when applyCRDs refused.
func (d *Deployer) applyBundleCRDs(ctx context.Context, g *restGetter, crds []*unstructured.Unstructured, target releaseID, bdName string, takeOwnership bool) error {
	err := applyCRDs(ctx, g, crds, target.name, target.namespace, takeOwnership)
	if err == nil || takeOwnership {
		return err
	}
	own, rest, serr := d.splitOwnCRDs(ctx, g, crds, target, bdName)
	if serr != nil || len(own) == 0 {
		return err
	}
	if err := applyCRDs(ctx, g, own, target.name, target.namespace, true); err != nil {
		return err
	}
	return applyCRDs(ctx, g, rest, target.name, target.namespace, false)
}

// splitOwnCRDs parts crds into those whose live CRD belongs to an earlier
// release of bdName and the others.
func (d *Deployer) splitOwnCRDs(ctx context.Context, g *restGetter, crds []*unstructured.Unstructured, target releaseID, bdName string) (own, rest []*unstructured.Unstructured, err error) {
	cfg, err := g.ToRESTConfig()
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	a := &adopter{d: d, target: target, bdName: bdName}
	res := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, crd := range crds {
		live, err := res.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			rest = append(rest, crd)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		ann := live.GetAnnotations()
		owner := releaseID{namespace: ann[releaseNSAnnotation], name: ann[releaseNameAnnotation]}
		mine := false
		if owner != target && owner.name != "" && owner.namespace != "" {
			if mine, err = a.ownEarlier(ctx, owner); err != nil {
				return nil, nil, err
			}
		}
		if mine {
			own = append(own, crd)
		} else {
			rest = append(rest, crd)
		}
	}
	return own, rest, nil
}
