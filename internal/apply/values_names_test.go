package apply_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
)

func gm(m map[string]interface{}) *fleet.GenericMap { return &fleet.GenericMap{Data: m} }

func withHelm(t fleet.BundleTarget, h *fleet.HelmOptions) fleet.BundleTarget {
	t.Helm = h
	return t
}

func selector(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

// gitRepoLikeBundle is what the bundle reader builds for Rancher's
// fleet-examples multi-cluster/helm layout: fleet.yaml customizations dev
// and prod with Helm values, then the GitRepo's targets of the same names
// (without Helm options), which are also its restrictions.
func gitRepoLikeBundle(name string) *fleet.Bundle {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	b.Spec.Resources = []fleet.BundleResource{{Name: "cm.yaml", Content: "kind: ConfigMap\n"}}
	b.Spec.Helm = &fleet.HelmOptions{Values: gm(map[string]interface{}{"greeting": "hello"})}
	b.Spec.Targets = []fleet.BundleTarget{
		withHelm(fleet.BundleTarget{Name: "dev", ClusterSelector: selector("env", "dev")},
			&fleet.HelmOptions{Values: gm(map[string]interface{}{"greeting": "hello dev"})}),
		withHelm(fleet.BundleTarget{Name: "prod", ClusterSelector: selector("env", "prod", "tier", "gold")},
			&fleet.HelmOptions{ReleaseName: "prod-release", Values: gm(map[string]interface{}{"password": "pr0d-s3cret", "replicas": float64(3)})}),
		{Name: "dev", ClusterSelector: selector("env", "dev")},
		{Name: "prod", ClusterSelector: selector("env", "prod")},
	}
	b.Spec.TargetRestrictions = []fleet.BundleTargetRestriction{
		{Name: "dev", ClusterSelector: selector("env", "dev")},
		{Name: "prod", ClusterSelector: selector("env", "prod")},
	}
	return b
}

// specJSON is a spec as the API server compares it: through its JSON form.
func specJSON(t *testing.T, s fleet.BundleSpec) interface{} {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var v interface{}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// A GitRepo whose targets are named like fleet.yaml's customizations with
// Helm values (Rancher's multi-cluster examples) is written, and the values
// read back from the stored Secret give the very spec that was built: the
// customizations get their values, the GitRepo's targets of the same names
// none. The stored Bundle went through the API server's JSON, so the
// marker that says which target had values survives it.
func TestSameNamedTargetsRoundTripThroughAPIServer(t *testing.T) {
	ctx := context.Background()
	orig := gitRepoLikeBundle("same-names")
	if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{orig.DeepCopy()}, apply.Options{Namespace: ns}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	stored := getBundle(t, "same-names")
	raw, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "pr0d-s3cret") || strings.Contains(string(raw), "hello dev") {
		t.Fatal("values left in the stored Bundle")
	}
	sec := must(getSecret("same-names"))
	if err := apply.SetValues(stored, sec.Data); err != nil {
		t.Fatal(err)
	}
	if apply.HashValues(sec.Data) != stored.Spec.ValuesHash {
		t.Fatal("the Secret does not hold the values the Bundle names")
	}
	stored.Spec.ValuesHash = ""
	if got, want := specJSON(t, stored.Spec), specJSON(t, orig.Spec); !reflect.DeepEqual(got, want) {
		gotJ, _ := json.Marshal(stored.Spec.Targets)
		wantJ, _ := json.Marshal(orig.Spec.Targets)
		t.Errorf("values put back into the stored Bundle differ from what was built:\n got targets %s\nwant targets %s", gotJ, wantJ)
	}
}

// Targets of one name may carry the same values; values that differ, or
// Helm options without the values another target of the name has, cannot
// be told apart once stored under that one name, so they are refused with
// a message naming both targets (and never a value).
func TestSameNamedTargetsValues(t *testing.T) {
	vals := func(v string) *fleet.HelmOptions {
		return &fleet.HelmOptions{Values: gm(map[string]interface{}{"password": v})}
	}
	equal := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: []fleet.BundleTarget{
		withHelm(fleet.BundleTarget{Name: "x", ClusterName: "a"}, vals("s3cret")),
		withHelm(fleet.BundleTarget{Name: "x", ClusterName: "b"}, vals("s3cret")),
		{Name: "x", ClusterName: "c"},
	}}}
	orig := equal.DeepCopy()
	data, _, err := apply.ExtractValues(equal)
	if err != nil {
		t.Fatalf("equal values: %v", err)
	}
	if err := apply.SetValues(equal, data); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(specJSON(t, equal.Spec), specJSON(t, orig.Spec)) {
		t.Errorf("equal values of one name: round trip changed the spec")
	}

	for name, targets := range map[string][]fleet.BundleTarget{
		"different values": {
			withHelm(fleet.BundleTarget{Name: "x", ClusterName: "a"}, vals("s3cret")),
			withHelm(fleet.BundleTarget{Name: "x", ClusterName: "b"}, vals("0ther")),
		},
		"helm options without the values": {
			withHelm(fleet.BundleTarget{Name: "x", ClusterName: "a"}, &fleet.HelmOptions{ReleaseName: "r"}),
			withHelm(fleet.BundleTarget{Name: "x", ClusterName: "b"}, vals("s3cret")),
		},
	} {
		b := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: targets}}
		_, _, err := apply.ExtractValues(b)
		if !errors.Is(err, apply.ErrInvalidValues) || !strings.Contains(err.Error(), "targets[0]") || !strings.Contains(err.Error(), "targets[1]") ||
			!strings.Contains(err.Error(), `"x"`) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: err = %v, want ErrInvalidValues naming targets[0] and targets[1] and no value", name, err)
		}
	}
}

// A Bundle and Secret written by Rancher Fleet, or by hand, may give a
// target name values while no target of the name has Helm options: the
// values go to every target of the name, as Rancher Fleet's manager gives
// them.
func TestValuesForTargetsWithoutHelmOptions(t *testing.T) {
	b := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: []fleet.BundleTarget{{Name: "prod", ClusterName: "a"}, {Name: "prod", ClusterName: "b"}, {Name: "dev"}}}}
	if err := apply.SetValues(b, map[string][]byte{"prod": []byte(`{"foo":"baz"}`)}); err != nil {
		t.Fatal(err)
	}
	for i, tg := range b.Spec.Targets {
		got := tg.Helm != nil && tg.Helm.Values != nil && tg.Helm.Values.Data["foo"] == "baz"
		if got != (tg.Name == "prod") {
			t.Errorf("targets[%d] (%s): helm %+v", i, tg.Name, tg.Helm)
		}
	}
}
