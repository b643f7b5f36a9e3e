package apply

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// RootValuesKey is the key of the bundle values Secret that holds
// spec.helm.values; every other key is the name of the target whose
// helm.values it holds. Both are JSON, as in Rancher Fleet, so Bundles and
// Secrets written by either are read by the other.
const RootValuesKey = "values.yaml"

// Helm values can hold passwords, and anyone allowed to read Bundles could
// read them there. So whoever writes a Bundle (fleet apply, a GitRepo, a
// HelmOp) moves them into a Secret of type fleet.SecretTypeBundleValues,
// named like the Bundle and owned by it, and keeps only their hash in
// spec.valuesHash; the manager puts them back when it computes the
// deployments (internal/controller/bundle).

// ErrInvalidValues: a Bundle's values cannot be stored in its values
// Secret as they are (see ExtractValues); the Bundle has to change.
var ErrInvalidValues = errors.New("helm values cannot be stored")

// ExtractValues moves the non-empty Helm values of b (spec.helm.values and
// every spec.targets[i].helm.values) out of its spec and returns them as the
// data of the values Secret with their hash; both are empty when b has no
// values. Empty value maps stay: they hold nothing and removing them would
// change the options a deployment ID is computed from. A target's values
// are found again by its name, which must therefore be a valid Secret key.
//
// Several targets may share a name: a GitRepo's targets are appended after
// fleet.yaml's customizations, and Rancher's examples name both dev, test
// and prod. The values go back only to the targets of the name that have
// Helm options (see SetValues), and a target keeps its (then empty) Helm
// options when its values are taken, so a GitRepo's target, which has
// none, gets nothing back. What cannot be told apart once stored under one
// name is refused: same-named targets with Helm options whose values
// differ, including one with options but no values.
func ExtractValues(b *fleet.Bundle) (map[string][]byte, string, error) {
	data := map[string][]byte{}
	if h := b.Spec.Helm; h != nil && h.Values != nil && len(h.Values.Data) > 0 {
		v, err := json.Marshal(h.Values.Data)
		if err != nil {
			return nil, "", fmt.Errorf("helm.values: %w", err)
		}
		data[RootValuesKey] = v
	}
	// from is the first target whose values each key holds.
	from := map[string]int{}
	for i, t := range b.Spec.Targets {
		if !hasValues(t.Helm) {
			continue
		}
		switch {
		case t.Name == "":
			return nil, "", fmt.Errorf("%w: targets[%d] has helm values but no name: give it one, its values are stored under it", ErrInvalidValues, i)
		case t.Name == RootValuesKey || len(validation.IsConfigMapKey(t.Name)) > 0:
			return nil, "", fmt.Errorf("%w: targets[%d]: the name %q cannot key its helm values (letters, digits, '-', '_' and '.' only, not %q)", ErrInvalidValues, i, t.Name, RootValuesKey)
		}
		v, err := json.Marshal(t.Helm.Values.Data)
		if err != nil {
			return nil, "", fmt.Errorf("targets[%d].helm.values: %w", i, err)
		}
		if j, ok := from[t.Name]; ok {
			// Marshalled with sorted keys: equal values, equal bytes.
			if !bytes.Equal(data[t.Name], v) {
				return nil, "", fmt.Errorf("%w: targets[%d] and targets[%d] are both named %q and have different helm values, which are stored under that one name: give them names of their own, or the same values",
					ErrInvalidValues, j, i, t.Name)
			}
			continue
		}
		from[t.Name] = i
		data[t.Name] = v
	}
	for i, t := range b.Spec.Targets {
		if j, ok := from[t.Name]; ok && t.Helm != nil && !hasValues(t.Helm) {
			return nil, "", fmt.Errorf("%w: targets[%d] and targets[%d] are both named %q, and targets[%d] has helm options but not the helm values of targets[%d], which are stored under that one name and would be given to both: give them names of their own, or the same values",
				ErrInvalidValues, min(i, j), max(i, j), t.Name, i, j)
		}
	}
	if len(data) == 0 {
		return nil, "", nil
	}
	if hasValues(b.Spec.Helm) {
		b.Spec.Helm.Values = nil
	}
	for i := range b.Spec.Targets {
		if h := b.Spec.Targets[i].Helm; hasValues(h) {
			// h stays, empty or not: it marks the target as one that
			// gets the values of its name back.
			h.Values = nil
		}
	}
	return data, HashValues(data), nil
}

// hasValues reports whether h holds non-empty Helm values.
func hasValues(h *fleet.HelmOptions) bool {
	return h != nil && h.Values != nil && len(h.Values.Data) > 0
}

// HashValues is the hash spec.valuesHash holds for a values Secret's data:
// the hex sha256 of its JSON encoding (keys sorted, values base64), as in
// Rancher Fleet.
func HashValues(data map[string][]byte) string {
	j, err := json.Marshal(data)
	if err != nil {
		// A map of byte slices always encodes.
		panic(err)
	}
	d := sha256.Sum256(j)
	return hex.EncodeToString(d[:])
}

// SetValues puts the values of a values Secret's data back into b's spec,
// the reverse of ExtractValues. A target name's values go to the targets
// of that name that have Helm options, which ExtractValues leaves on every
// target it took values from (a GitRepo's target of the same name has none
// and gets nothing, as in the spec that was written). When no target of
// the name has Helm options (a Bundle written by hand, or by a writer that
// drops empty options), they go to every target of the name, as Rancher
// Fleet's manager gives them. SetValues replaces the Helm options it
// changes rather than modifying them, so b may be a shallow copy of a
// Bundle that must stay as it is. Keys naming no target are ignored.
func SetValues(b *fleet.Bundle, data map[string][]byte) error {
	if v, ok := data[RootValuesKey]; ok && len(v) > 0 {
		gm, err := decodeValues(v)
		if err != nil {
			return fmt.Errorf("key %s: %w", RootValuesKey, err)
		}
		h := &fleet.HelmOptions{}
		if b.Spec.Helm != nil {
			h = b.Spec.Helm.DeepCopy()
		}
		h.Values = gm
		b.Spec.Helm = h
	}
	withHelm := map[string]bool{}
	for _, t := range b.Spec.Targets {
		if t.Helm != nil {
			withHelm[t.Name] = true
		}
	}
	copied := false
	for i := range b.Spec.Targets {
		name := b.Spec.Targets[i].Name
		v, ok := data[name]
		if !ok || len(v) == 0 || name == RootValuesKey || (b.Spec.Targets[i].Helm == nil && withHelm[name]) {
			continue
		}
		gm, err := decodeValues(v)
		if err != nil {
			return fmt.Errorf("key %s: %w", name, err)
		}
		if !copied {
			b.Spec.Targets = append([]fleet.BundleTarget(nil), b.Spec.Targets...)
			copied = true
		}
		h := &fleet.HelmOptions{}
		if b.Spec.Targets[i].Helm != nil {
			h = b.Spec.Targets[i].Helm.DeepCopy()
		}
		h.Values = gm
		b.Spec.Targets[i].Helm = h
	}
	return nil
}

// decodeValues reads values as the API server would have decoded them
// from the Bundle spec (numbers as float64), so that a deployment computed
// from the Secret is the one computed from the spec.
func decodeValues(v []byte) (*fleet.GenericMap, error) {
	gm := &fleet.GenericMap{}
	if err := gm.UnmarshalJSON(v); err != nil {
		// Not wrapped: a syntax error quotes a character of the values.
		return nil, errors.New("values are not a JSON object")
	}
	return gm, nil
}

// ValuesSecretKey is where a Bundle's values Secret lives: named like the
// Bundle, in its namespace.
func ValuesSecretKey(b *fleet.Bundle) client.ObjectKey {
	return client.ObjectKey{Namespace: b.Namespace, Name: b.Name}
}

// valuesWrite is a write of writeValues, to undo it (see undoValues).
type valuesWrite struct {
	// written is the Secret as written: its UID and resourceVersion
	// guard the undo against later writes.
	written *corev1.Secret
	// prev is the Secret as it was before, nil when there was none.
	prev *corev1.Secret
}

// writeValues makes the values Secret of b (which must exist: the Secret is
// owned by it) hold data, labelled with labels (those b is being written
// with, so that a Bundle moved to another shard takes its Secret along). It
// returns what it wrote, nil when nothing. A Secret of that name that is
// not a values Secret is not touched: the bundle name is taken, which is an
// error.
func writeValues(ctx context.Context, c client.Client, reader client.Reader, b *fleet.Bundle, labels map[string]string, data map[string][]byte) (*valuesWrite, error) {
	key := ValuesSecretKey(b)
	owner := metav1.OwnerReference{
		APIVersion: fleet.GroupVersion.String(), Kind: "Bundle", Name: b.Name, UID: b.UID,
		Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true),
	}
	existing := &corev1.Secret{}
	err := reader.Get(ctx, key, existing)
	switch {
	case apierrors.IsNotFound(err):
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: maps.Clone(labels),
				OwnerReferences: []metav1.OwnerReference{owner}},
			Type: corev1.SecretType(fleet.SecretTypeBundleValues),
			Data: data,
		}
		if err := c.Create(ctx, sec); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Created meanwhile: the conflict retry reads it again.
				return nil, apierrors.NewConflict(corev1.Resource("secrets"), key.Name, err)
			}
			return nil, fmt.Errorf("creating values Secret %s/%s: %w", key.Namespace, key.Name, err)
		}
		return &valuesWrite{written: sec}, nil
	case err != nil:
		return nil, fmt.Errorf("reading values Secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	if err := notValuesSecret(existing); err != nil {
		return nil, err
	}
	if sameData(existing.Data, data) && maps.Equal(nonNil(existing.Labels), nonNil(labels)) &&
		len(existing.OwnerReferences) == 1 && sameOwner(existing.OwnerReferences[0], owner) {
		return nil, nil
	}
	prev := existing.DeepCopy()
	// A values Secret of an earlier Bundle of this name (deleted, not yet
	// collected) is taken over: it now belongs to this one.
	existing.Data = data
	existing.Labels = maps.Clone(labels)
	existing.OwnerReferences = []metav1.OwnerReference{owner}
	if err := c.Update(ctx, existing); err != nil {
		if apierrors.IsConflict(err) {
			return nil, err
		}
		if apierrors.IsNotFound(err) {
			// Deleted since it was read (the garbage collector or the
			// manager removing an earlier Bundle's Secret): the conflict
			// retry reads again and creates it.
			return nil, apierrors.NewConflict(corev1.Resource("secrets"), key.Name, err)
		}
		return nil, fmt.Errorf("updating values Secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	return &valuesWrite{written: existing, prev: prev}, nil
}

// undoTimeout bounds undoValues, which runs also when the apply's context
// has ended.
const undoTimeout = 10 * time.Second

// undoValues puts a values Secret back as it was before w: w stored values
// for a Bundle write that then failed, so the Secret no longer held the
// values the Bundle's hash names, and the manager would deploy nothing of
// the Bundle until some later write succeeded. A Secret written by someone
// else since w is theirs and stays (the UID and resourceVersion
// preconditions); one w created is deleted.
//
// The Bundle (key) is read again first, with reader (uncached), because a
// failed write is not always a write that did not happen: one that timed
// out on the client may have been stored, and then the Bundle names
// exactly what w wrote, which must stay.
func undoValues(ctx context.Context, c client.Client, reader client.Reader, key client.ObjectKey, w *valuesWrite) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	sec := w.written
	live := &fleet.Bundle{}
	if err := reader.Get(ctx, key, live); err == nil && live.Spec.ValuesHash == HashValues(sec.Data) {
		return nil
	} else if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("restoring values Secret %s/%s: reading Bundle: %w", sec.Namespace, sec.Name, err)
	}
	var err error
	if w.prev == nil {
		uid, rv := sec.UID, sec.ResourceVersion
		err = c.Delete(ctx, sec.DeepCopy(), client.Preconditions{UID: &uid, ResourceVersion: &rv})
	} else {
		restored := sec.DeepCopy()
		restored.Data = w.prev.Data
		restored.Labels = w.prev.Labels
		restored.OwnerReferences = w.prev.OwnerReferences
		err = c.Update(ctx, restored)
	}
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return fmt.Errorf("restoring values Secret %s/%s: %w", sec.Namespace, sec.Name, err)
}

// valuesSecretFree checks that b's values Secret either does not exist or
// is a values Secret.
func valuesSecretFree(ctx context.Context, reader client.Reader, b *fleet.Bundle) error {
	existing := &corev1.Secret{}
	err := reader.Get(ctx, ValuesSecretKey(b), existing)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading values Secret %s/%s: %w", b.Namespace, b.Name, err)
	}
	return notValuesSecret(existing)
}

// notValuesSecret is an error when sec, named like a bundle, is some other
// Secret (a user's credentials, say), which must not be overwritten.
func notValuesSecret(sec *corev1.Secret) error {
	if sec.Type == corev1.SecretType(fleet.SecretTypeBundleValues) {
		return nil
	}
	return fmt.Errorf("%w: Secret %s/%s exists with type %q, and the bundle's Helm values would be stored there (type %s); rename the bundle or that Secret",
		ErrOwnedByOther, sec.Namespace, sec.Name, sec.Type, fleet.SecretTypeBundleValues)
}

// deleteValues removes b's values Secret, if there is one (a Secret of
// that name of another type is not Fleet's and stays).
func deleteValues(ctx context.Context, c client.Client, reader client.Reader, b *fleet.Bundle) (bool, error) {
	key := ValuesSecretKey(b)
	existing := &corev1.Secret{}
	if err := reader.Get(ctx, key, existing); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading values Secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	if existing.Type != corev1.SecretType(fleet.SecretTypeBundleValues) {
		return false, nil
	}
	if err := c.Delete(ctx, existing, client.Preconditions{UID: &existing.UID}); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("deleting values Secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	return true, nil
}

func sameData(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, bytes.Equal)
}

// sameOwner compares owner references by value (Controller and
// BlockOwnerDeletion are pointers).
func sameOwner(a, b metav1.OwnerReference) bool {
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
		boolOf(a.Controller) == boolOf(b.Controller) && boolOf(a.BlockOwnerDeletion) == boolOf(b.BlockOwnerDeletion)
}

func boolOf(p *bool) bool { return p != nil && *p }

func ptrTo[T any](v T) *T { return &v }
