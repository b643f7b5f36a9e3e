package apply_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// valuesBundle is a Bundle named name with password as its Helm values.
func valuesBundle(name, password string, labels map[string]string) *fleet.Bundle {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	b.Spec.Resources = []fleet.BundleResource{{Name: "cm.yaml", Content: "kind: ConfigMap\n"}}
	b.Spec.Helm = &fleet.HelmOptions{Values: gm(map[string]interface{}{"password": password})}
	b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	return b
}

// The values Secret is written before the Bundle. When the API server then
// refuses the Bundle (an admission policy, a size limit, validation), the
// Secret gets its previous values back: otherwise it would hold values the
// Bundle's hash does not name, and the Bundle would wait for its values
// (deploying nothing) until some later write succeeded.
func TestValuesRestoredWhenBundleRefused(t *testing.T) {
	ctx := context.Background()
	const name = "refused-update"
	if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{valuesBundle(name, "0ld", nil)}, apply.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	before := getBundle(t, name)

	policy, binding := fleettest.Denial{
		Name: "refuse-bundle-update", Operation: admissionv1.Update, Resource: "bundles",
		Allow: fmt.Sprintf("object.metadata.name != '%s'", name), Message: "bundle updates refused for this test",
	}.Objects()
	for _, o := range []client.Object{policy, binding} {
		if err := up.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = up.Client.Delete(context.Background(), o) })
	}
	// The API server enforces a policy once its informer has it.
	fleettest.Eventually(t, 30*time.Second, func() error {
		probe := getBundle(t, name)
		probe.Annotations = map[string]string{"probe": "yes"}
		err := up.Client.Update(ctx, probe, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "refused for this test") {
			return fmt.Errorf("policy not in force yet (%v)", err)
		}
		return nil
	})

	err := apply.Apply(ctx, up.Client, []*fleet.Bundle{valuesBundle(name, "n3w", nil)}, apply.Options{Namespace: ns})
	if err == nil || !strings.Contains(err.Error(), "refused for this test") {
		t.Fatalf("apply with the Bundle update refused: err = %v", err)
	}
	if strings.Contains(err.Error(), "n3w") || strings.Contains(err.Error(), "0ld") {
		t.Errorf("the error quotes a value: %v", err)
	}
	after := getBundle(t, name)
	sec := must(getSecret(name))
	if after.Spec.ValuesHash != before.Spec.ValuesHash {
		t.Fatalf("the refused Bundle changed: hash %s -> %s", before.Spec.ValuesHash, after.Spec.ValuesHash)
	}
	if h := apply.HashValues(sec.Data); h != after.Spec.ValuesHash {
		t.Errorf("the values Secret no longer holds the values the Bundle names (hash %s, Bundle's %s)", h, after.Spec.ValuesHash)
	}
	if got := storedValues(t, after)[apply.RootValuesKey]["password"]; got != "0ld" {
		t.Errorf("stored password %v, want the previous one", got)
	}

	// The refusal lifted, the same apply goes through.
	for _, o := range []client.Object{binding, policy} {
		if err := up.Client.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	fleettest.Eventually(t, 30*time.Second, func() error {
		return apply.Apply(ctx, up.Client, []*fleet.Bundle{valuesBundle(name, "n3w", nil)}, apply.Options{Namespace: ns})
	})
	final := getBundle(t, name)
	if h := apply.HashValues(must(getSecret(name)).Data); h != final.Spec.ValuesHash || storedValues(t, final)[apply.RootValuesKey]["password"] != "n3w" {
		t.Errorf("values after the refusal went: hash %s, Bundle's %s", h, final.Spec.ValuesHash)
	}
}

// The values Secret carries the labels the Bundle is written with, not
// those it had: a GitRepo moved to another shard relabels its Bundles, and
// their values Secrets must follow (the manager of the new shard watches
// only its own).
func TestValuesSecretFollowsBundleLabels(t *testing.T) {
	ctx := context.Background()
	const name = "relabelled"
	labels := map[string]string{fleet.RepoLabel: "moving", fleet.ShardLabel: "shard-a"}
	if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{valuesBundle(name, "s3cret", labels)}, apply.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	moved := maps.Clone(labels)
	moved[fleet.ShardLabel] = "shard-b"
	if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{valuesBundle(name, "s3cret", moved)}, apply.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if b := getBundle(t, name); !maps.Equal(b.Labels, moved) {
		t.Fatalf("bundle labels %v, want %v", b.Labels, moved)
	}
	if sec := must(getSecret(name)); !maps.Equal(sec.Labels, moved) {
		t.Errorf("values Secret labels %v, want the Bundle's new labels %v", sec.Labels, moved)
	}
}
