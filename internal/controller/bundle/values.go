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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/kubeclient"
	"github.com/fleetgo/fleet/internal/target"
)

// ReasonValuesPending: the Bundle's spec.valuesHash names Helm values its
// values Secret does not hold (yet): the writer stores the Secret and the
// Bundle in two writes. Nothing is deployed from the Bundle until they
// match, which would deploy it without its values.
const ReasonValuesPending = "ValuesPending"

// onValuesSecretRead is called before each read of a values Secret from
// the API server; tests count the reads with it (export_test.go).
var onValuesSecretRead = func(client.ObjectKey) {}

// onValuesRetry is called with the delay (before jitter) after which a
// Bundle waiting for its values is looked at again; tests record it.
var onValuesRetry = func(client.ObjectKey, time.Duration) {}

// valuesNow is the clock of the values retry timer (valuesRetryAfter);
// tests stop it for their Bundles to tell the timer's passes from others.
var valuesNow = func(client.ObjectKey) time.Time { return time.Now() }

// errValuesPending marks a values Secret that is missing or does not
// match the Bundle's hash yet.
var errValuesPending = errors.New("waiting for the bundle's values Secret")

// withValues returns b itself when its Helm values are in its spec (no
// spec.valuesHash: a Bundle created with kubectl, or by an older writer),
// otherwise a copy with the values of its values Secret (see package apply)
// put back, read with r (uncached: the manager does not cache Secret
// payloads). b is not modified: it is what the status is written from, and
// the values must not travel with it. `fleet target` previews with it; the
// reconciler uses bundleWithValues, which avoids reading the Secret again.
func withValues(ctx context.Context, r client.Reader, b *fleet.Bundle) (*fleet.Bundle, error) {
	if b.Spec.ValuesHash == "" {
		return b, nil
	}
	sec, err := readValuesSecret(ctx, r, apply.ValuesSecretKey(b))
	if err != nil {
		return nil, err
	}
	return valuesFromSecret(b, sec)
}

// readValuesSecret GETs the values Secret key; nil when there is none.
func readValuesSecret(ctx context.Context, r client.Reader, key client.ObjectKey) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	onValuesSecretRead(key)
	if err := r.Get(ctx, key, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading values Secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	return sec, nil
}

// valuesFromSecret is b with the values of sec (its values Secret, nil
// when missing) put back, or why they cannot be. Messages name the
// Secret and its keys, never a value.
func valuesFromSecret(b *fleet.Bundle, sec *corev1.Secret) (*fleet.Bundle, error) {
	key := apply.ValuesSecretKey(b)
	switch {
	case sec == nil:
		return nil, fmt.Errorf("%w: Secret %s/%s not found", errValuesPending, key.Namespace, key.Name)
	case sec.Type != corev1.SecretType(fleet.SecretTypeBundleValues):
		// Not written by a Fleet writer (which never touches such a
		// Secret): only renaming one of them resolves it.
		return nil, fmt.Errorf("%w: Secret %s/%s is of type %q, not %s; rename the bundle or that Secret",
			errValuesPending, key.Namespace, key.Name, sec.Type, fleet.SecretTypeBundleValues)
	case apply.HashValues(sec.Data) != b.Spec.ValuesHash:
		return nil, fmt.Errorf("%w: Secret %s/%s does not hold the values of spec.valuesHash (yet)", errValuesPending, key.Namespace, key.Name)
	}
	out := new(fleet.Bundle)
	*out = *b // SetValues copies what it changes
	if err := apply.SetValues(out, sec.Data); err != nil {
		return nil, &target.BundleError{Err: fmt.Errorf("values Secret %s/%s: %w", key.Namespace, key.Name, err)}
	}
	return out, nil
}

// valuesEntry is a Bundle's values Secret as the reconciler last read it.
type valuesEntry struct {
	// uid and resourceVersion are the Secret's, both "" when there was
	// none.
	uid             types.UID
	resourceVersion string
	// sec holds the type and, for a values Secret only, the data (never
	// logged); nil when there was none. hash is of the data of a values
	// Secret, "" otherwise.
	sec  *corev1.Secret
	hash string
	// waits counts the retry timer's passes in a row that found the
	// Secret not holding the values of the hash awaited, which sets when
	// the Bundle is looked at again (valuesRetryAfter). due is when the
	// timer set last is to fire: passes before it (the Bundle's own
	// changes, bursts of BundleDeployment status reports) do not count,
	// or a Bundle waiting for a Secret that no watch event announces
	// would reach the longest delay within seconds.
	waits   int
	due     time.Time
	awaited string
}

// Bounds of the delay after which a Bundle waiting for its values is
// looked at again: it doubles with every pass of the retry timer that
// finds them still missing. The Secret's watch wakes the Bundle at once
// when the Secret is written, with or without an owner reference
// (valuesSecretHandler); the retry covers what no event announces (a
// watch event lost, a Secret written while its Bundle was not in this
// replica's cache yet).
const (
	valuesRetry    = 5 * time.Second
	valuesRetryMax = 5 * time.Minute
)

// bundleWithValues is withValues for the reconciler, which reconciles a
// Bundle far more often than its values change: every burst of
// BundleDeployment status reports does, and each GET of the Secret was an
// API request per pass. So the Secret last read for each Bundle is kept
// (r.values), and the metadata informer (kept anyway, to notice values
// Secrets being written) decides whether it is read again:
//   - while the Bundle's hash is that of the data kept, the data kept is
//     used as long as the Secret is the same object (UID), even when it has
//     changed since: a writer stores new values in the Secret before the new
//     hash in the Bundle, and until the Bundle follows, the data kept is
//     exactly what it names (reading the new data would report
//     ValuesPending for nothing);
//   - while the Bundle waits for the same hash and the Secret is as it was
//     at the last read (or still missing), the verdict stands without a
//     read;
//   - otherwise (a new hash, a Secret changed, created or deleted), it is
//     read again, so a Bundle whose new hash arrives before the informer's
//     copy of the Secret never waits for it.
//
// Only values Secrets have their data kept, in memory only; entries go
// with the Bundle.
func (r *Reconciler) bundleWithValues(ctx context.Context, b *fleet.Bundle) (*fleet.Bundle, error) {
	key := apply.ValuesSecretKey(b)
	if b.Spec.ValuesHash == "" {
		r.values.Delete(key)
		return b, nil
	}
	var last *valuesEntry
	if e, ok := r.values.Load(key); ok {
		last = e.(*valuesEntry)
		m := kubeclient.MetadataOf(corev1.SchemeGroupVersion.WithKind("Secret"))
		err := r.Get(ctx, key, m)
		switch {
		case err == nil && m.UID == last.uid && last.hash == b.Spec.ValuesHash:
			return valuesFromSecret(b, last.sec)
		case last.awaited == b.Spec.ValuesHash && last.waits > 0 &&
			((apierrors.IsNotFound(err) && last.uid == "") ||
				(err == nil && m.UID == last.uid && m.ResourceVersion == last.resourceVersion)):
			return valuesFromSecret(b, last.sec)
		}
	}
	sec, err := readValuesSecret(ctx, r.APIReader, key)
	if err != nil {
		return nil, err
	}
	e := &valuesEntry{}
	if sec != nil {
		e.uid, e.resourceVersion = sec.UID, sec.ResourceVersion
		e.sec = &corev1.Secret{Type: sec.Type}
		if sec.Type == corev1.SecretType(fleet.SecretTypeBundleValues) {
			e.sec.Data, e.hash = sec.Data, apply.HashValues(sec.Data)
		}
	}
	out, verr := valuesFromSecret(b, e.sec)
	if errors.Is(verr, errValuesPending) {
		e.awaited = b.Spec.ValuesHash
		if last != nil && last.awaited == e.awaited {
			e.waits, e.due = last.waits, last.due
		}
	}
	r.values.Store(key, e)
	return out, verr
}

// valuesRetryAfter is how soon the Bundle key, waiting for its values, is
// looked at again: valuesRetry after the first pass that found them
// missing, doubling with every pass of the retry timer (one at or after
// the time it was set for) that finds them still missing, up to
// valuesRetryMax. Other passes leave the delay, and the timer already set,
// as they are. Called on the passes that found the values missing only
// (bundleWithValues has stored the entry); a Bundle is reconciled by one
// worker at a time, so the entry is not written concurrently.
func (r *Reconciler) valuesRetryAfter(key client.ObjectKey) time.Duration {
	e := &valuesEntry{}
	if v, ok := r.values.Load(key); ok {
		e = v.(*valuesEntry)
	}
	now := valuesNow(key)
	counted := e.waits == 0 || !now.Before(e.due)
	waits := e.waits
	if counted {
		waits++
	}
	d := valuesRetry
	for i := 1; i < waits && d < valuesRetryMax; i++ {
		d *= 2
	}
	d = min(d, valuesRetryMax)
	if counted {
		n := *e
		n.waits, n.due = waits, now.Add(d)
		r.values.Store(key, &n)
	}
	return d
}

// deleteValuesSecret deletes the values Secret of the Bundle key, which is
// gone or going, as the garbage collector would once it goes (the
// quickstart, devenv and envtest run none): only when its controller
// reference is a Bundle of that name, and that Bundle is owner (when set)
// or no longer exists. A Secret of that name without it (a user's, or
// one whose writer keeps it itself) stays. A Bundle created again under the
// name meanwhile takes the Secret over (a new owner, a new
// resourceVersion), which the delete's preconditions respect.
func (r *Reconciler) deleteValuesSecret(ctx context.Context, key client.ObjectKey, owner types.UID) error {
	m := kubeclient.MetadataOf(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.APIReader.Get(ctx, key, m); err != nil {
		return client.IgnoreNotFound(err)
	}
	ref := metav1.GetControllerOf(m)
	if ref == nil || ref.Kind != "Bundle" || ref.Name != key.Name || m.DeletionTimestamp != nil {
		return nil
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != fleet.GroupVersion.Group {
		return nil
	}
	pre := client.Preconditions{UID: &m.UID}
	if owner != "" {
		if ref.UID != owner {
			return nil
		}
	} else {
		live := kubeclient.MetadataOf(fleet.GroupVersion.WithKind("Bundle"))
		err := r.APIReader.Get(ctx, key, live)
		if err == nil && live.UID == ref.UID {
			return nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		pre.ResourceVersion = &m.ResourceVersion
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := r.Delete(ctx, sec, pre); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting values Secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	return nil
}

// setValuesPending reports on the Ready condition that the Bundle waits
// for its values. The observed generation stays: this generation is not
// deployed yet, and what waits on it (the GitRepo roll-up, kubectl wait)
// must not take it as done. Waiting is not stalling: a Stalled condition
// of earlier values that could not be read goes.
func setValuesPending(b *fleet.Bundle, err error) {
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
		Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonValuesPending, Message: err.Error(), ObservedGeneration: b.Generation,
	})
	meta.RemoveStatusCondition(&b.Status.Conditions, fleet.ConditionStalled)
}

// valuesSecretHandler enqueues the Bundle a values Secret (named like it)
// belongs to when the Secret changes or goes, so that a Bundle waiting for
// its values goes on as soon as they are written. It sees metadata only.
// The Bundle is the one that controls the Secret or, for a Secret written
// without that owner reference (Rancher's ManagedChart controller writes
// them so, as may a user or another tool), the Bundle of the Secret's name
// that takes its values from a Secret (valuesBundleInCache): the event
// tells neither the Secret's type nor its data, so the Bundle decides, and
// a Secret whose name is no such Bundle's costs a cache lookup and no
// reconcile. Every shard's manager watches every Secret, so it enqueues
// only the Bundles of its own shard (ownValuesSecret, or the Bundle's own
// labels): another shard's would cost it an uncached read
// (movedToOtherShard) per write, and could have it take their Secrets for
// orphans.
func (r *Reconciler) valuesSecretHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, q queue, objs ...client.Object) {
		o := objs[len(objs)-1]
		wake := false
		if controlledByBundleOfName(o) {
			wake = r.ownValuesSecret(ctx, objs...)
		} else {
			wake = r.valuesBundleInCache(ctx, o)
		}
		if wake {
			q.Add(req(o.GetNamespace(), o.GetName()))
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) { enqueue(ctx, q, e.Object) },
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			if e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion() {
				enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
			}
		},
		// Deleted under its Bundle: the status says at once that the
		// values are missing (nothing deployed changes).
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) { enqueue(ctx, q, e.Object) },
	}
}

// controlledByBundleOfName reports whether o's controller reference is a
// Bundle of o's name, as a Fleet writer sets it on a values Secret.
func controlledByBundleOfName(o client.Object) bool {
	ref := metav1.GetControllerOfNoCopy(o)
	if ref == nil || ref.Kind != "Bundle" || ref.Name != o.GetName() {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == fleet.GroupVersion.Group
}

// valuesBundleInCache reports whether the Secret o, which no Bundle of
// its name controls, may be the values Secret of a Bundle of this replica: this
// replica's cache holds a Bundle of o's namespace and name, of this shard,
// that names its values by spec.valuesHash (so reads them from the Secret
// of its name, whoever wrote it). Such a Bundle is woken whether it waits
// for its values or has them: a deleted Secret is reported at once, as one
// it controls is, and a pass for a Secret unchanged in what the Bundle
// names costs no read (bundleWithValues). Its values retry (waits, due) is
// left as it is by such a pass: only the retry timer's passes lengthen it.
func (r *Reconciler) valuesBundleInCache(ctx context.Context, o client.Object) bool {
	b := &fleet.Bundle{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, b); err != nil {
		return false
	}
	return b.Spec.ValuesHash != "" && b.Labels[fleet.ShardLabel] == r.Opts.ShardID
}

// ownValuesSecret reports whether a values Secret (in any of the versions
// an event shows, so a Secret moving between shards wakes both) belongs to
// this replica's shard: it carries its Bundle's labels, the shard label
// included. A Secret whose labels lag behind its Bundle's (written by an
// earlier build, or by hand) still belongs here when the Bundle, as this
// replica's cache holds it, does.
func (r *Reconciler) ownValuesSecret(ctx context.Context, versions ...client.Object) bool {
	for _, o := range versions {
		if o.GetLabels()[fleet.ShardLabel] == r.Opts.ShardID {
			return true
		}
	}
	o := versions[len(versions)-1]
	b := &fleet.Bundle{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, b); err != nil {
		return false
	}
	return b.Labels[fleet.ShardLabel] == r.Opts.ShardID
}
