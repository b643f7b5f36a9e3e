package apply_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/cli"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// storedValues reads b's values Secret and decodes each key.
func storedValues(t *testing.T, b *fleet.Bundle) map[string]map[string]interface{} {
	t.Helper()
	sec := &corev1.Secret{}
	if err := up.Client.Get(context.Background(), client.ObjectKey{Namespace: b.Namespace, Name: b.Name}, sec); err != nil {
		t.Fatalf("values Secret of %s: %v", b.Name, err)
	}
	out := map[string]map[string]interface{}{}
	for k, v := range sec.Data {
		m := map[string]interface{}{}
		if err := json.Unmarshal(v, &m); err != nil {
			t.Fatalf("values Secret %s key %s: %v", b.Name, k, err)
		}
		out[k] = m
	}
	return out
}

func getBundle(t *testing.T, name string) *fleet.Bundle {
	t.Helper()
	b := &fleet.Bundle{}
	if err := up.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func getSecret(name string) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	return sec, up.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, sec)
}

// valuesFleetYAML is fleettest.ValuesFleetYAML with Bundle labels, which
// the values Secret must carry too, and a defaultNamespace for env=dev.
const valuesFleetYAML = "labels:\n  team: blue\n" + fleettest.ValuesFleetYAML + "  defaultNamespace: dev\n"

// writeBundleDir writes a bundle directory with fleet.yaml, its values file
// and a manifest.
func writeBundleDir(t *testing.T, fleetYAML string) string {
	t.Helper()
	dir := t.TempDir()
	fleettest.WriteValuesBundle(t, dir, fleetYAML)
	return dir
}

// Helm values (spec.helm.values with merged valuesFiles, and a
// customization's) are stored in a Secret owned by the Bundle, never in the
// Bundle, which keeps their hash; the Secret follows every change and goes
// when the values go.
func TestValuesLiveInSecret(t *testing.T) {
	dir := writeBundleDir(t, valuesFleetYAML)
	t.Chdir(dir)
	flags := &cli.ApplyFlags{Labels: map[string]string{fleet.RepoLabel: "vals"}}
	out, err := fleetApply(t, flags, "vals", ".")
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	b := getBundle(t, "vals")
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cret", "pr0d-s3cret", "k3y"} {
		if strings.Contains(string(raw), secret) || strings.Contains(out, secret) {
			t.Errorf("value %q readable in the Bundle or the output of fleet apply", secret)
		}
	}
	if b.Spec.ValuesHash == "" || (b.Spec.Helm != nil && b.Spec.Helm.Values != nil) {
		t.Errorf("bundle spec: valuesHash %q, helm %+v; want a hash and no values", b.Spec.ValuesHash, b.Spec.Helm)
	}
	for _, tg := range b.Spec.Targets {
		if tg.Helm != nil && tg.Helm.Values != nil {
			t.Errorf("target %s keeps its values in the Bundle", tg.Name)
		}
	}

	sec, err := getSecret("vals")
	if err != nil {
		t.Fatal(err)
	}
	if sec.Type != fleet.SecretTypeBundleValues {
		t.Errorf("type %q", sec.Type)
	}
	if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != b.UID || sec.OwnerReferences[0].Kind != "Bundle" ||
		sec.OwnerReferences[0].Controller == nil || !*sec.OwnerReferences[0].Controller {
		t.Errorf("owner references %+v, want the Bundle (uid %s) as controller", sec.OwnerReferences, b.UID)
	}
	if !reflect.DeepEqual(sec.Labels, b.Labels) || sec.Labels["team"] != "blue" {
		t.Errorf("labels %v, want the Bundle's %v", sec.Labels, b.Labels)
	}
	if h := apply.HashValues(sec.Data); h != b.Spec.ValuesHash {
		t.Errorf("valuesHash %s, Secret hashes to %s", b.Spec.ValuesHash, h)
	}
	vals := storedValues(t, b)
	root, prod := vals[apply.RootValuesKey], vals["prod"]
	if root["password"] != "s3cret" || root["apiKey"] != "k3y" || root["replicas"] != float64(2) || prod["password"] != "pr0d-s3cret" {
		t.Errorf("stored values %v", vals)
	}
	if _, ok := vals["dev"]; ok || len(vals) != 2 {
		t.Errorf("keys %v, want %s and prod (dev has no values)", reflect.ValueOf(vals).MapKeys(), apply.RootValuesKey)
	}

	// Unchanged: neither is written again.
	out, err = fleetApply(t, flags, "vals", ".")
	if err != nil {
		t.Fatal(err)
	}
	again, sec2 := getBundle(t, "vals"), must(getSecret("vals"))
	if !strings.Contains(out, "unchanged") || again.ResourceVersion != b.ResourceVersion || sec2.ResourceVersion != sec.ResourceVersion {
		t.Errorf("unchanged apply wrote (output %q)", out)
	}

	// A new value: the Secret holds it and the hash moves.
	if err := os.WriteFile("fleet.yaml", []byte(strings.Replace(valuesFleetYAML, "password: s3cret", "password: n3w", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fleetApply(t, flags, "vals", "."); err != nil {
		t.Fatal(err)
	}
	changed := getBundle(t, "vals")
	if changed.Spec.ValuesHash == b.Spec.ValuesHash || storedValues(t, changed)[apply.RootValuesKey]["password"] != "n3w" {
		t.Errorf("values change not stored: hash %s -> %s", b.Spec.ValuesHash, changed.Spec.ValuesHash)
	}
	if h := apply.HashValues(must(getSecret("vals")).Data); h != changed.Spec.ValuesHash {
		t.Errorf("valuesHash %s, Secret hashes to %s", changed.Spec.ValuesHash, h)
	}

	// No values any more: no hash, no Secret.
	if err := os.WriteFile("fleet.yaml", []byte("helm:\n  releaseName: vals\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fleetApply(t, flags, "vals", "."); err != nil {
		t.Fatal(err)
	}
	if got := getBundle(t, "vals"); got.Spec.ValuesHash != "" {
		t.Errorf("valuesHash %q kept without values", got.Spec.ValuesHash)
	}
	if _, err := getSecret("vals"); !apierrors.IsNotFound(err) {
		t.Errorf("values Secret after the values went: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A Secret that happens to have the bundle's name (a user's credentials)
// is never overwritten with values, and no Bundle is created that would
// wait for them.
func TestValuesSecretNameTaken(t *testing.T) {
	ctx := context.Background()
	mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"}, StringData: map[string]string{"token": "t0ken"}}
	if err := up.Client.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	t.Chdir(writeBundleDir(t, valuesFleetYAML))
	_, err := fleetApply(t, &cli.ApplyFlags{}, "taken", ".")
	if err == nil || !strings.Contains(err.Error(), "Secret "+ns+"/taken exists") {
		t.Fatalf("err = %v, want the name clash", err)
	}
	sec := must(getSecret("taken"))
	if string(sec.Data["token"]) != "t0ken" || len(sec.Data) != 1 || sec.Type != corev1.SecretTypeOpaque {
		t.Errorf("the user's Secret was changed: %v", sec.Type)
	}
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "taken"}, &fleet.Bundle{}); !apierrors.IsNotFound(err) {
		t.Errorf("bundle created: %v", err)
	}
}

// A Bundle given with a hash and no values (read back from the cluster, as
// fleet apply -b may) is written as it is: its values Secret stays.
func TestBundleWithHashOnlyKeepsSecret(t *testing.T) {
	ctx := context.Background()
	t.Chdir(writeBundleDir(t, valuesFleetYAML))
	if _, err := fleetApply(t, &cli.ApplyFlags{}, "hashonly", "."); err != nil {
		t.Fatal(err)
	}
	stored := getBundle(t, "hashonly")
	sec := must(getSecret("hashonly"))
	again := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: stored.Name, Labels: stored.Labels}, Spec: stored.Spec}
	res, err := apply.ApplyWithResult(ctx, up.Client, []*fleet.Bundle{again}, apply.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Unchanged) != 1 {
		t.Errorf("result %+v, want unchanged", res)
	}
	after := must(getSecret("hashonly"))
	if after.ResourceVersion != sec.ResourceVersion || getBundle(t, "hashonly").Spec.ValuesHash != stored.Spec.ValuesHash {
		t.Error("re-applying the stored Bundle changed its values")
	}
}

// ExtractValues and SetValues are inverse: the spec the manager computes
// deployments from is the one that was built.
func TestExtractSetValuesRoundTrip(t *testing.T) {
	gm := func(m map[string]interface{}) *fleet.GenericMap { return &fleet.GenericMap{Data: m} }
	orig := &fleet.Bundle{Spec: fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "c", Values: gm(map[string]interface{}{"a": float64(1), "n": map[string]interface{}{"b": "x"}})}},
		Targets: []fleet.BundleTarget{
			{Name: "one", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: gm(map[string]interface{}{"a": float64(2)})}}},
			{Name: "empty", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: gm(map[string]interface{}{})}}},
			{Name: "none"},
		},
	}}
	b := orig.DeepCopy()
	data, hash, err := apply.ExtractValues(b)
	if err != nil || hash == "" || len(data) != 2 {
		t.Fatalf("extract: %v, hash %q, keys %d", err, hash, len(data))
	}
	if b.Spec.Helm.Values != nil || b.Spec.Targets[0].Helm.Values != nil || b.Spec.Helm.Chart != "c" {
		t.Errorf("values left in the spec: %+v", b.Spec)
	}
	cleared := b.DeepCopy()
	if err := apply.SetValues(b, data); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b.Spec, orig.Spec) {
		t.Errorf("round trip changed the spec:\n got %+v\nwant %+v", b.Spec, orig.Spec)
	}
	// SetValues copies what it changes: a shallow copy leaves the original.
	shallow := *cleared
	if err := apply.SetValues(&shallow, data); err != nil {
		t.Fatal(err)
	}
	if cleared.Spec.Helm.Values != nil || cleared.Spec.Targets[0].Helm.Values != nil {
		t.Error("SetValues wrote into the Bundle it was given a copy of")
	}

	for name, targets := range map[string][]fleet.BundleTarget{
		"unnamed":   {{BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: gm(map[string]interface{}{"a": "b"})}}}},
		"duplicate": {{Name: "x", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: gm(map[string]interface{}{"a": "b"})}}}, {Name: "x", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: gm(map[string]interface{}{"a": "c"})}}}},
		"root key":  {{Name: apply.RootValuesKey, BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: gm(map[string]interface{}{"a": "b"})}}}},
		"bad key":   {{Name: "a b", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: gm(map[string]interface{}{"a": "b"})}}}},
	} {
		b := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: targets}}
		if _, _, err := apply.ExtractValues(b); !errors.Is(err, apply.ErrInvalidValues) {
			t.Errorf("%s: err = %v, want ErrInvalidValues", name, err)
		}
	}
}
