package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// longestValuesRetry is the longest delay after which a Bundle waiting for
// its values is looked at again (docs/targeting.md: up to 5 minutes).
const longestValuesRetry = 5 * time.Minute

// Rancher's ManagedChart controller writes a Bundle's values Secret
// without an owner reference, as may a user or another tool. Its events
// must wake the Bundle waiting for it as an owned Secret's do: the retry
// timer alone, backed off to 5 minutes, left such a Bundle undeployed for
// that long. Here the timer is made to wait its longest first, so only the
// Secret's watch can wake the Bundle within the test. Secrets that are not
// a Bundle's values Secret (a name no Bundle has, or a Bundle's that takes
// no values from a Secret) must wake nothing.
func TestValuesSecretWithoutOwnerWakesBundle(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-noowner"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "mc", map[string]string{"env": "dev"}, time.Second)
	key := client.ObjectKey{Namespace: ws, Name: "managed"}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	bundle.SetValuesClock(key, t0)
	data := map[string][]byte{apply.RootValuesKey: []byte(`{"password":"s3cret"}`)}

	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: key.Name}}
	b.Spec.Resources = resources("kind: ConfigMap\n")
	b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	b.Spec.ValuesHash = apply.HashValues(data)
	must(t, env.Client.Create(ctx, b))
	eventually(t, 30*time.Second, func() error { return valuesPending(ctx, key, "not found") })
	waitLongestValuesRetry(t, ctx, b, t0)

	// Secrets that are no Bundle's values Secret: one whose name no Bundle
	// has, one named like a Bundle without spec.valuesHash.
	plain := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "plain"}}
	plain.Spec.Resources = resources("kind: ConfigMap\n")
	plain.Spec.Targets = []fleet.BundleTarget{{Name: "none", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "none"}}}}
	must(t, env.Client.Create(ctx, plain))
	plainKey := client.ObjectKeyFromObject(plain)
	eventually(t, 30*time.Second, func() error {
		if c, err := readyCondition(ctx, plainKey); err != nil || c == nil {
			return fmt.Errorf("bundle without values not reconciled yet: %v %v", c, err)
		}
		return nil
	})
	strayKey := client.ObjectKey{Namespace: ws, Name: "stray"}
	plainPasses, waitingPasses := bundle.Reconciles(plainKey), bundle.Reconciles(key)
	for _, name := range []string{strayKey.Name, plainKey.Name} {
		must(t, env.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
			Type:       fleet.SecretTypeBundleValues,
			Data:       data,
		}))
	}
	consistently(t, 2*time.Second, func() error {
		if n := bundle.Reconciles(strayKey); n != 0 {
			return fmt.Errorf("a Secret whose name is no Bundle's caused %d reconciles", n)
		}
		if n := bundle.Reconciles(plainKey) - plainPasses; n != 0 {
			return fmt.Errorf("a Secret named like a Bundle without valuesHash caused %d reconciles of it", n)
		}
		if n := bundle.Reconciles(key) - waitingPasses; n != 0 {
			return fmt.Errorf("other Secrets caused %d reconciles of the Bundle waiting for its values", n)
		}
		return nil
	})

	// Written without an owner reference, but not (yet) with the values
	// the hash names: the Bundle is looked at at once, goes on waiting,
	// and its wait is not lengthened by that pass.
	mark := len(bundle.ValuesRetries(key))
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: key.Name},
		Type:       fleet.SecretTypeBundleValues,
		Data:       map[string][]byte{apply.RootValuesKey: []byte(`{"password":"0ld"}`)},
	}
	must(t, env.Client.Create(ctx, sec))
	eventually(t, 30*time.Second, func() error {
		if n := len(bundle.ValuesRetries(key)); n == mark {
			return fmt.Errorf("the values Secret written without owner reference did not wake its Bundle")
		}
		return valuesPending(ctx, key, "does not hold the values")
	})
	for i, d := range bundle.ValuesRetries(key)[mark:] {
		if d != longestValuesRetry {
			t.Errorf("pass %d woken by the Secret retries after %s, want %s left as it was", mark+i+1, d, longestValuesRetry)
		}
	}

	// The right values, still without owner reference: deployed long
	// before the retry timer is due.
	update(t, ctx, sec, false, func() { sec.Data = data })
	valuesOn(t, ctx, ws, key.Name, map[string]map[string]interface{}{"mc": {"password": "s3cret"}})
	waitValuesOK(t, ctx, key)

	// Deleted: reported at once; what is deployed stays.
	before := deploymentIDs(t, ctx, ws, key.Name)
	must(t, env.Client.Delete(ctx, sec))
	eventually(t, 30*time.Second, func() error { return valuesPending(ctx, key, "not found") })
	if after := deploymentIDs(t, ctx, ws, key.Name); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("deployments changed when the values Secret went: %v, were %v", after, before)
	}
}

// valuesPending is nil when the Bundle key reports ValuesPending with a
// message containing msg.
func valuesPending(ctx context.Context, key client.ObjectKey, msg string) error {
	c, err := readyCondition(ctx, key)
	if err != nil {
		return err
	}
	if c == nil || c.Reason != bundle.ReasonValuesPending || !strings.Contains(c.Message, msg) {
		return fmt.Errorf("ready condition %+v, want %s mentioning %q", c, bundle.ReasonValuesPending, msg)
	}
	return nil
}

// waitLongestValuesRetry brings the values retry of b, waiting for its
// values since t0 on its retry clock, to its longest delay: each change
// of b's labels after the clock has moved past the timer set last is a
// pass that doubles the delay. No shorter timer is left behind: the work
// queue holds a Bundle once, an event makes it ready at once (dropping
// its timer), and the pass sets the next one.
func waitLongestValuesRetry(t *testing.T, ctx context.Context, b *fleet.Bundle, t0 time.Time) {
	t.Helper()
	key := client.ObjectKeyFromObject(b)
	for i := 1; ; i++ {
		delays := bundle.ValuesRetries(key)
		if len(delays) > 0 && delays[len(delays)-1] == longestValuesRetry {
			break
		}
		if i > 20 {
			t.Fatalf("the values retry did not reach %s: %v", longestValuesRetry, delays)
		}
		bundle.SetValuesClock(key, t0.Add(time.Duration(i)*time.Hour))
		update(t, ctx, b, false, func() { b.Labels = map[string]string{"pass": fmt.Sprint(i)} })
		eventually(t, 30*time.Second, func() error {
			if n := len(bundle.ValuesRetries(key)); n == len(delays) {
				return fmt.Errorf("%d passes waiting for values, want more", n)
			}
			return nil
		})
	}
}
