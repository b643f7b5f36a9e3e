package target

import (
	"reflect"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestSharedOptionsMatchPerClusterCompute: the options, deploymentID and
// customizations Compute gives each cluster of a large set (where clusters
// with the same selection share one computation) are exactly those of the
// cluster computed alone, for shared and templated values; and no two
// targets share the memory of their options.
func TestSharedOptionsMatchPerClusterCompute(t *testing.T) {
	for name, values := range map[string]map[string]interface{}{
		"shared":         {"replicas": int64(2), "image": map[string]interface{}{"tag": "v1"}},
		"templated":      {"name": "${ .ClusterName }"},
		"label-ref":      {"env": "global.fleet.clusterLabels.env"},
		"templated-key":  {"${ .ClusterName }": "x"},
		"nested-in-list": {"list": []interface{}{map[string]interface{}{"n": "${ .ClusterLabels.env }"}}},
	} {
		t.Run(name, func(t *testing.T) {
			in := benchInput(6, values)
			all, err := Compute(in)
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != 6 {
				t.Fatalf("%d targets, want 6", len(all))
			}
			for _, got := range all {
				alone := in
				alone.Clusters = []ClusterInfo{got.Info}
				want, err := Compute(alone)
				if err != nil || len(want) != 1 {
					t.Fatalf("alone: %v, %d targets", err, len(want))
				}
				w := want[0]
				if got.DeploymentID != w.DeploymentID || got.TargetName != w.TargetName ||
					!reflect.DeepEqual(got.Customizations, w.Customizations) || !reflect.DeepEqual(got.Options, w.Options) {
					t.Errorf("cluster %s: got %s %s %v %+v, want %s %s %v %+v", got.Key(),
						got.DeploymentID, got.TargetName, got.Customizations, got.Options.Helm.Values,
						w.DeploymentID, w.TargetName, w.Customizations, w.Options.Helm.Values)
				}
			}
			// The controller strips values from a deployment's options in
			// place: that must not reach any other target.
			all[0].Options.Helm.Values = nil
			all[0].Options.NamespaceLabels = map[string]string{"x": "y"}
			for _, o := range all[1:] {
				if o.Options.Helm.Values == nil || o.Options.NamespaceLabels["x"] == "y" {
					t.Fatalf("target %s shares options memory with %s", o.Key(), all[0].Key())
				}
			}
		})
	}
}

func TestClusterIndependent(t *testing.T) {
	for _, c := range []struct {
		opts fleet.BundleDeploymentOptions
		want bool
	}{
		{fleet.BundleDeploymentOptions{}, true},
		{fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{}}, true},
		{fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{TemplateValues: map[string]string{"a": "b"}}}, false},
		{fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{"a": "$ {not}"}}}}, true},
		{fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{"a": "x ${ .ClusterName }"}}}}, false},
		{fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{"a": "global.fleet.clusterLabels.x"}}}}, false},
	} {
		if got := clusterIndependent(c.opts); got != c.want {
			t.Errorf("clusterIndependent(%+v) = %v, want %v", c.opts.Helm, got, c.want)
		}
	}
}
