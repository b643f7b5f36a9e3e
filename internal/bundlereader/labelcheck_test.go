package bundlereader

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestFleetYAMLLabelsAreValidated: labels and annotations the API server
// would refuse on the Bundle or the target namespace fail the whole read
// as a ParseError naming the fleet.yaml and the key, so no bundle of the
// commit is written (rather than all but the one the API server refuses).
func TestFleetYAMLLabelsAreValidated(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // in the message
	}{
		{name: "label value with spaces", yaml: "labels:\n  team: a b c\n", want: []string{"labels", `"team"`, "label value"}},
		{name: "label key", yaml: "labels:\n  'bad key!': x\n", want: []string{"labels", `"bad key!"`, "label key"}},
		{name: "label value too long", yaml: "labels:\n  team: " + strings.Repeat("a", 64) + "\n", want: []string{"labels", `"team"`}},
		{name: "label key prefix", yaml: "labels:\n  Example.COM/x: v\n", want: []string{"labels", `"Example.COM/x"`}},
		{name: "namespaceLabels", yaml: "namespaceLabels:\n  env: prod/eu\n", want: []string{"namespaceLabels", `"env"`}},
		{name: "namespaceAnnotations key", yaml: "namespaceAnnotations:\n  'a b': x\n", want: []string{"namespaceAnnotations", `"a b"`, "annotation key"}},
		{name: "namespaceAnnotations size", yaml: "namespaceAnnotations:\n  big: " + strings.Repeat("x", 256*1024) + "\n", want: []string{"namespaceAnnotations", "262144"}},
		{name: "targetCustomizations", yaml: "targetCustomizations:\n- name: eu\n  clusterSelector: {matchLabels: {region: eu}}\n  namespaceLabels:\n    env: a b\n",
			want: []string{"targetCustomizations[0].namespaceLabels", `"env"`}},
		{name: "targets", yaml: "targets:\n- name: eu\n  namespaceAnnotations:\n    '-x': v\n", want: []string{"targets[0].namespaceAnnotations", `"-x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRepo(t, map[string]string{
				"good/fleet.yaml": "labels:\n  team: web\n",
				"good/cm.yaml":    "kind: ConfigMap\n",
				"bad/fleet.yaml":  tc.yaml,
				"bad/cm.yaml":     "kind: ConfigMap\n",
			})
			bs, err := Read(context.Background(), "repo", dir, nil, Options{})
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Read = %d bundles, %v; want a *ParseError", len(bs), err)
			}
			if pe.Path != "bad/fleet.yaml" {
				t.Errorf("ParseError.Path = %q, want bad/fleet.yaml", pe.Path)
			}
			for _, w := range append([]string{"bad/fleet.yaml"}, tc.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestFleetYAMLValidLabelsAreKept: what the API server accepts is kept:
// prefixed keys, empty values, and annotation values of any text.
func TestFleetYAMLValidLabelsAreKept(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"fleet.yaml": "labels:\n  team: web\n  example.com/tier: front-end_1.2\n  empty: ''\n" +
			"namespaceLabels:\n  env: prod\nnamespaceAnnotations:\n  Example.com/Note: any text, with spaces / slashes\n",
		"cm.yaml": "kind: ConfigMap\n",
	})
	b, err := readOne(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Labels["example.com/tier"] != "front-end_1.2" || b.Labels["team"] != "web" {
		t.Errorf("labels = %v", b.Labels)
	}
	if b.Spec.NamespaceAnnotations["Example.com/Note"] != "any text, with spaces / slashes" || b.Spec.NamespaceLabels["env"] != "prod" {
		t.Errorf("namespace labels %v, annotations %v", b.Spec.NamespaceLabels, b.Spec.NamespaceAnnotations)
	}
}

// FuzzFleetYAMLLabels: a fleet.yaml is accepted exactly when the API
// server's own validation accepts its labels and namespace annotations.
func FuzzFleetYAMLLabels(f *testing.F) {
	for _, kv := range [][2]string{
		{"team", "web"}, {"team", "a b c"}, {"bad key!", "x"}, {"example.com/x", ""}, {"a/b/c", "x"},
		{"-a", "x"}, {"a", "-x"}, {"Example.COM/x", "y"}, {strings.Repeat("k", 64), "v"}, {"k", strings.Repeat("v", 64)},
	} {
		f.Add(kv[0], kv[1])
	}
	f.Fuzz(func(t *testing.T, k, v string) {
		if !utf8.ValidString(k + v) {
			t.Skip() // JSON would change the key or value
		}
		labels := map[string]string{k: v}
		kj, _ := json.Marshal(k)
		vj, _ := json.Marshal(v)
		entry := string(kj) + ": " + string(vj)
		_, _, err := ParseFleetYAML([]byte("labels: {" + entry + "}\n"))
		if reservedLabels[k] || (err != nil && strings.HasPrefix(err.Error(), "invalid ")) {
			return // dropped with a warning, or not YAML at all
		}
		if apiErrs := metav1validation.ValidateLabels(labels, field.NewPath("labels")); (len(apiErrs) == 0) != (err == nil) {
			t.Errorf("labels %q: reader says %v, API server says %v", labels, err, apiErrs)
		}
		_, _, err = ParseFleetYAML([]byte("namespaceAnnotations: {" + entry + "}\n"))
		if err != nil && strings.HasPrefix(err.Error(), "invalid ") {
			return
		}
		if apiErrs := apivalidation.ValidateAnnotations(labels, field.NewPath("annotations")); (len(apiErrs) == 0) != (err == nil) {
			t.Errorf("annotations %q: reader says %v, API server says %v", labels, err, apiErrs)
		}
	})
}
