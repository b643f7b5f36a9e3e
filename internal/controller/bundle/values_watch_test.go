package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// A writer stores new values in the Secret, then the new hash in the
// Bundle. Between the two writes the Bundle still names the values it
// has, which the manager already read: the Secret's change neither makes
// it report ValuesPending nor costs a read, and the Bundle's write then
// deploys the new values.
func TestSecretWrittenBeforeBundleKeepsReady(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-between"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "ba", map[string]string{"env": "dev"}, time.Second)
	old := map[string]interface{}{"password": "0ld"}
	applyWithValues(t, ctx, ws, "between", old)
	valuesOn(t, ctx, ws, "between", map[string]map[string]interface{}{"ba": old})
	key := client.ObjectKey{Namespace: ws, Name: "between"}
	waitValuesOK(t, ctx, key)
	before := deploymentIDs(t, ctx, ws, "between")
	reads, passes := bundle.ValuesSecretReads(key), bundle.Reconciles(key)

	newData := map[string][]byte{apply.RootValuesKey: []byte(`{"password":"n3w"}`)}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "between"}}
	update(t, ctx, sec, false, func() { sec.Data = newData })
	// The Secret's event reconciles the Bundle.
	eventually(t, 30*time.Second, func() error {
		if bundle.Reconciles(key) == passes {
			return fmt.Errorf("not reconciled since the Secret changed")
		}
		return nil
	})
	consistently(t, 3*time.Second, func() error {
		c, err := readyCondition(ctx, key)
		if err != nil {
			return err
		}
		if c == nil || c.Reason == bundle.ReasonValuesPending {
			return fmt.Errorf("ready condition %+v between the writer's two writes", c)
		}
		if after := deploymentIDs(t, ctx, ws, "between"); fmt.Sprint(after) != fmt.Sprint(before) {
			return fmt.Errorf("deployments changed before the Bundle did: %v, were %v", after, before)
		}
		return nil
	})
	if n := bundle.ValuesSecretReads(key) - reads; n != 0 {
		t.Errorf("the values Secret was read %d times while the Bundle still named the values read before", n)
	}

	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "between"}}
	update(t, ctx, b, false, func() { b.Spec.ValuesHash = apply.HashValues(newData) })
	valuesOn(t, ctx, ws, "between", map[string]map[string]interface{}{"ba": {"password": "n3w"}})
	waitValuesOK(t, ctx, key)
}

// orphanValuesSecret creates a values Secret controlled by a Bundle of its
// name that does not exist.
func orphanValuesSecret(t *testing.T, ctx context.Context, ws, name string, labels map[string]string) *corev1.Secret {
	t.Helper()
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name, Labels: labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: fleet.GroupVersion.String(), Kind: "Bundle", Name: name, UID: "0d1e7e7e-0000-4000-8000-000000000001", Controller: ptr(true),
		}}},
		Type: fleet.SecretTypeBundleValues,
		Data: map[string][]byte{apply.RootValuesKey: []byte(`{"password":"s3cret"}`)},
	}
	must(t, env.Client.Create(ctx, sec))
	return sec
}

// A values Secret carries its Bundle's shard label. Only the manager of
// that shard reacts to it: another shard's (here the unsharded one's)
// neither reconciles its Bundle nor takes it for an orphan to delete,
// while a Secret of its own shard is handled.
func TestValuesSecretOfOtherShardIgnored(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-shard"
	createNamespace(t, ctx, ws, nil)
	alien := orphanValuesSecret(t, ctx, ws, "alien", map[string]string{fleet.ShardLabel: "elsewhere"})
	orphanValuesSecret(t, ctx, ws, "local", nil)
	eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: "local"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("this shard's orphaned values Secret: %v", err)
		}
		return nil
	})
	alienKey := types.NamespacedName{Namespace: ws, Name: "alien"}
	consistently(t, 2*time.Second, func() error {
		if n := bundle.Reconciles(alienKey); n != 0 {
			return fmt.Errorf("another shard's Bundle reconciled %d times for its values Secret", n)
		}
		got := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(alien), got); err != nil || got.DeletionTimestamp != nil {
			return fmt.Errorf("another shard's values Secret deleted: %v", err)
		}
		return nil
	})
}

// A Bundle waiting for its values (its Secret missing, or of another type)
// is looked at again after valuesRetry, which its own changes do not
// lengthen (only the retry timer's passes do: values_retry_test.go), and
// those passes, like the ones its own changes cause, do not read the Secret from the API server again
// while the watched metadata shows it unchanged; the Secret being written
// still wakes it at once.
func TestValuesPendingBacksOff(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-backoff"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "bo", map[string]string{"env": "dev"}, time.Second)
	data := map[string][]byte{apply.RootValuesKey: []byte(`{"password":"s3cret"}`)}

	for _, tc := range []struct {
		name, message string
		// secret, when set, is the Secret of the bundle's name there is
		// from the start (not a values Secret).
		secret *corev1.Secret
	}{
		{name: "missing", message: "not found"},
		{name: "wrongtype", message: `of type "Opaque"`, secret: &corev1.Secret{Type: corev1.SecretTypeOpaque, StringData: map[string]string{"token": "t0ken"}}},
	} {
		key := client.ObjectKey{Namespace: ws, Name: tc.name}
		// The retry timer's time stands still: every pass is one of
		// the Bundle's changes.
		bundle.SetValuesClock(key, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		if tc.secret != nil {
			tc.secret.ObjectMeta = metav1.ObjectMeta{Namespace: ws, Name: tc.name}
			must(t, env.Client.Create(ctx, tc.secret))
		}
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: tc.name}}
		b.Spec.Resources = resources("kind: ConfigMap\n")
		b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
		b.Spec.ValuesHash = apply.HashValues(data)
		must(t, env.Client.Create(ctx, b))

		// Each change of the Bundle's labels is a pass (as each poll is).
		const passes = 5
		for i := 1; i <= passes; i++ {
			eventually(t, 30*time.Second, func() error {
				if n := len(bundle.ValuesRetries(key)); n < i {
					return fmt.Errorf("%s: %d passes waiting for values, want %d", tc.name, n, i)
				}
				return nil
			})
			if i == 1 {
				c, err := readyCondition(ctx, key)
				must(t, err)
				if c == nil || c.Reason != bundle.ReasonValuesPending || !strings.Contains(c.Message, tc.message) {
					t.Fatalf("%s: ready condition %+v", tc.name, c)
				}
			}
			if i < passes {
				update(t, ctx, b, false, func() { b.Labels = map[string]string{"pass": fmt.Sprint(i)} })
			}
		}
		delays := bundle.ValuesRetries(key)
		for i, d := range delays {
			if want := 5 * time.Second; d != want {
				t.Errorf("%s: pass %d waiting for values retries after %s, want %s (all: %v)", tc.name, i+1, d, want, delays)
			}
		}
		if n := bundle.ValuesSecretReads(key); n != 1 {
			t.Errorf("%s: the Secret was read %d times over %d passes while it did not change, want once", tc.name, n, len(delays))
		}

		// The values arrive: deployed long before the next retry is due.
		if tc.secret != nil {
			must(t, env.Client.Delete(ctx, tc.secret))
		}
		must(t, env.Client.Get(ctx, key, b))
		must(t, env.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: tc.name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: fleet.GroupVersion.String(), Kind: "Bundle", Name: tc.name, UID: b.UID, Controller: ptr(true),
			}}},
			Type: fleet.SecretTypeBundleValues,
			Data: data,
		}))
		valuesOn(t, ctx, ws, tc.name, map[string]map[string]interface{}{"bo": {"password": "s3cret"}})
	}
}
