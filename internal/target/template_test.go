package target

import (
	"reflect"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestTemplateContextCleaning pins which cluster labels and annotations
// templates see. Fleet drops kubectl.kubernetes.io/* keys and keys
// containing "cattle.io/" (with the slash) from both, and keeps
// fleet.cattle.io/* and management.cattle.io/* for labels only, so that a
// huge last-applied-configuration or Rancher's own annotations never reach
// a chart's values.
func TestTemplateContextCleaning(t *testing.T) {
	cases := []struct {
		key            string
		wantLabel      bool
		wantAnnotation bool
	}{
		{key: "env", wantLabel: true, wantAnnotation: true},
		{key: "example.com/team", wantLabel: true, wantAnnotation: true},
		{key: "kubectl.kubernetes.io/last-applied-configuration", wantLabel: false, wantAnnotation: false},
		{key: "secret.cattle.io/x", wantLabel: false, wantAnnotation: false},
		{key: "objectset.rio.cattle.io/hash", wantLabel: false, wantAnnotation: false},
		{key: "fleet.cattle.io/k", wantLabel: true, wantAnnotation: false},
		{key: "management.cattle.io/cluster-name", wantLabel: true, wantAnnotation: false},
		{key: "provider.cattle.io", wantLabel: true, wantAnnotation: true},
		{key: "my.cattle.io.example", wantLabel: true, wantAnnotation: true},
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			c := cluster("a")
			c.Labels = map[string]string{tc.key: "v"}
			c.Annotations = map[string]string{tc.key: "v"}
			ctx := TemplateContext(c)
			_, gotLabel := ctx["ClusterLabels"].(map[string]interface{})[tc.key]
			_, gotAnnotation := ctx["ClusterAnnotations"].(map[string]interface{})[tc.key]
			if gotLabel != tc.wantLabel {
				t.Errorf("label kept = %v, want %v", gotLabel, tc.wantLabel)
			}
			if gotAnnotation != tc.wantAnnotation {
				t.Errorf("annotation kept = %v, want %v", gotAnnotation, tc.wantAnnotation)
			}
		})
	}
}

// TestLabelRefsUseCleanedLabels: global.fleet.clusterLabels references see
// the same labels as .ClusterLabels, as in Fleet.
func TestLabelRefsUseCleanedLabels(t *testing.T) {
	c := cluster("a", withLabels("env", "prod", "secret.cattle.io/x", "hidden", "fleet.cattle.io/k", "kept",
		"kubectl.kubernetes.io/x", "hidden"))
	h := fleet.HelmOptions{Values: values(map[string]interface{}{
		"env":     "global.fleet.clusterLabels.env",
		"cattle":  "global.fleet.clusterLabels.secret.cattle.io/x",
		"fleet":   "global.fleet.clusterLabels.fleet.cattle.io/k",
		"kubectl": "global.fleet.clusterLabels.kubectl.kubernetes.io/x",
	})}
	got, err := RenderValues(fleet.BundleDeploymentOptions{Helm: &h}, c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]interface{}{"env": "prod", "cattle": "", "fleet": "kept", "kubectl": ""}
	if !reflect.DeepEqual(got.Helm.Values.Data, want) {
		t.Fatalf("got  %#v\nwant %#v", got.Helm.Values.Data, want)
	}
}

// TestTemplateValuesRenderedOnce: a templateValue's output is data, not a
// template. Rendering it a second time as part of values broke any value
// with "${" in it (a shell script, say).
func TestTemplateValuesRenderedOnce(t *testing.T) {
	c := cluster("alpha")
	c.Spec.TemplateValues = values(map[string]interface{}{"s": "echo ${HOME}", "n": "${ .ClusterName }"})
	cases := []struct {
		name string
		helm fleet.HelmOptions
		want map[string]interface{}
	}{
		{name: "shell variable from cluster values", helm: fleet.HelmOptions{TemplateValues: map[string]string{"script": "${ .ClusterValues.s }"}},
			want: map[string]interface{}{"script": "echo ${HOME}"}},
		{name: "template text from cluster values stays text", helm: fleet.HelmOptions{TemplateValues: map[string]string{"t": "${ .ClusterValues.n }"}},
			want: map[string]interface{}{"t": "${ .ClusterName }"}},
		{name: "values still rendered, templateValues replace top-level keys", helm: fleet.HelmOptions{
			Values:         values(map[string]interface{}{"name": "${ .ClusterName }", "script": map[string]interface{}{"old": "x"}}),
			TemplateValues: map[string]string{"script": "${ .ClusterValues.s }"},
		}, want: map[string]interface{}{"name": "alpha", "script": "echo ${HOME}"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.helm
			got, err := RenderValues(fleet.BundleDeploymentOptions{Helm: &h}, c)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Helm.Values.Data, tc.want) {
				t.Fatalf("got  %#v\nwant %#v", got.Helm.Values.Data, tc.want)
			}
			if got.Helm.TemplateValues != nil {
				t.Fatalf("templateValues left in the options: %v", got.Helm.TemplateValues)
			}
		})
	}
}
