package apply_test

import (
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
)

// The values Secret and valuesHash are written as Rancher Fleet writes
// them, so that Bundles move between the two either way: key values.yaml
// and one per target name, each the JSON of the values, and the hash the
// sha256 of the JSON of the Secret's data (keys sorted, values base64).
// The digests are literals computed independently with sha256sum:
//
//	printf '{"values.yaml":"eyJmb28iOiJiYXIifQ=="}' | sha256sum
//	printf '{"prod":"eyJmb28iOiJiYXoifQ==","values.yaml":"eyJmb28iOiJiYXIifQ=="}' | sha256sum
func TestValuesEncodingAsRancher(t *testing.T) {
	gm := func(m map[string]interface{}) *fleet.GenericMap { return &fleet.GenericMap{Data: m} }
	for _, tc := range []struct {
		name    string
		targets []fleet.BundleTarget
		keys    map[string]string
		hash    string
	}{
		{
			name: "root values",
			keys: map[string]string{"values.yaml": `{"foo":"bar"}`},
			hash: "33f746f3114036db34d18b1f8d638b614910073506377f0011b1311d1f5d5062",
		},
		{
			name: "root and target values",
			targets: []fleet.BundleTarget{
				{Name: "prod", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: gm(map[string]interface{}{"foo": "baz"})}}},
				{Name: "dev"},
			},
			keys: map[string]string{"values.yaml": `{"foo":"bar"}`, "prod": `{"foo":"baz"}`},
			hash: "3cc55da3efa28bea69ca6a636a97963197a7413cf5bd2ddf3fe2d4caa03131f3",
		},
	} {
		b := &fleet.Bundle{Spec: fleet.BundleSpec{Targets: tc.targets}}
		b.Spec.Helm = &fleet.HelmOptions{Values: gm(map[string]interface{}{"foo": "bar"})}
		data, hash, err := apply.ExtractValues(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if hash != tc.hash || apply.HashValues(data) != tc.hash {
			t.Errorf("%s: hash %s, want %s", tc.name, hash, tc.hash)
		}
		if len(data) != len(tc.keys) {
			t.Errorf("%s: %d keys, want %d", tc.name, len(data), len(tc.keys))
		}
		for k, v := range tc.keys {
			if string(data[k]) != v {
				t.Errorf("%s: key %s = %s, want %s", tc.name, k, data[k], v)
			}
		}
	}
}
