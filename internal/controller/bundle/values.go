package bundle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/target"
)

// ReasonValuesPending: the Bundle's spec.valuesHash names Helm values its
// values Secret does not hold (yet): the writer stores the Secret and the
// Bundle in two writes. Nothing is deployed from the Bundle until they
// match, which would deploy it without its values.
const ReasonValuesPending = "ValuesPending"

// valuesRetry is how soon a Bundle waiting for its values is looked at
// again when no event of its values Secret comes first.
const valuesRetry = 5 * time.Second

// errValuesPending marks a values Secret that is missing or does not
// match the Bundle's hash yet.
var errValuesPending = errors.New("waiting for the bundle's values Secret")

// withValues returns b itself when its Helm values are in its spec (no
// spec.valuesHash: a Bundle created with kubectl, or by an older writer),
// otherwise a copy with the values of its values Secret (see package apply)
// put back, read with r (uncached: the manager does not cache Secret
// payloads). b is not modified: it is what the status is written from, and
// the values must not travel with it.
func withValues(ctx context.Context, r client.Reader, b *fleet.Bundle) (*fleet.Bundle, error) {
	if b.Spec.ValuesHash == "" {
		return b, nil
	}
	key := apply.ValuesSecretKey(b)
	sec := &corev1.Secret{}
	if err := r.Get(ctx, key, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: Secret %s/%s not found", errValuesPending, key.Namespace, key.Name)
		}
		return nil, fmt.Errorf("reading values Secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	if sec.Type != corev1.SecretType(fleet.SecretTypeBundleValues) || apply.HashValues(sec.Data) != b.Spec.ValuesHash {
		return nil, fmt.Errorf("%w: Secret %s/%s does not hold the values of spec.valuesHash (yet)", errValuesPending, key.Namespace, key.Name)
	}
	out := new(fleet.Bundle)
	*out = *b // SetValues copies what it changes
	if err := apply.SetValues(out, sec.Data); err != nil {
		return nil, &target.BundleError{Err: fmt.Errorf("values Secret %s/%s: %w", key.Namespace, key.Name, err)}
	}
	return out, nil
}

// setValuesPending reports on the Ready condition that the Bundle waits
// for its values. The observed generation stays: this generation is not
// deployed yet, and what waits on it (the GitRepo roll-up, kubectl wait)
// must not take it as done.
func setValuesPending(b *fleet.Bundle, err error) {
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
		Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonValuesPending, Message: err.Error(), ObservedGeneration: b.Generation,
	})
}

// valuesSecretHandler enqueues the Bundle that controls a values Secret
// (named like it) when the Secret changes, so that a Bundle waiting for
// its values goes on as soon as they are written. It sees metadata only.
func (r *Reconciler) valuesSecretHandler() handler.EventHandler {
	enqueue := func(o client.Object, q queue) {
		for _, ref := range o.GetOwnerReferences() {
			gv, err := schema.ParseGroupVersion(ref.APIVersion)
			if err != nil || gv.Group != fleet.GroupVersion.Group || ref.Kind != "Bundle" || ref.Controller == nil || !*ref.Controller || ref.Name != o.GetName() {
				continue
			}
			q.Add(req(o.GetNamespace(), ref.Name))
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) { enqueue(e.Object, q) },
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			if e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion() {
				enqueue(e.ObjectNew, q)
			}
		},
	}
}
