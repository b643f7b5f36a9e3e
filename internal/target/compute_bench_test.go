package target

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// benchInput is a bundle with a customization for half of n clusters and
// Helm values, as a fleet.yaml of a real repo would have.
func benchInput(n int, values map[string]interface{}) Input {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "app"}}
	b.Spec.Helm = &fleet.HelmOptions{Chart: "app", Values: &fleet.GenericMap{Data: values}}
	b.Spec.Targets = []fleet.BundleTarget{
		{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{TargetNamespace: "prod"}},
		{Name: "all", ClusterSelector: &metav1.LabelSelector{}},
	}
	in := Input{Bundle: b, ManifestID: "s-0123456789abcdef"}
	for i := range n {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: fmt.Sprintf("c-%05d", i),
			Labels: map[string]string{"env": []string{"dev", "prod"}[i%2]}}}
		c.Status.Namespace = names.ClusterNamespace(c.Namespace, c.Name)
		in.Clusters = append(in.Clusters, ClusterInfo{Cluster: c})
	}
	return in
}

// BenchmarkCompute10k is one targeting pass of a bundle over 10,000
// clusters: with values every cluster shares, and with values templated per
// cluster (which cannot share anything).
func BenchmarkCompute10k(b *testing.B) {
	for _, bc := range []struct {
		name   string
		values map[string]interface{}
	}{
		{"shared-values", map[string]interface{}{"replicas": int64(2), "image": map[string]interface{}{"tag": "v1"}}},
		{"templated-values", map[string]interface{}{"name": "${ .ClusterName }"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := benchInput(10000, bc.values)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Compute(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRetarget10kx10 is a full retarget: 10 bundles each computed
// over the same 10,000 clusters, as the bundle workers do after a manager
// restart; with values every cluster shares, and with half of the bundles'
// values templated per cluster (where rendering dominates).
func BenchmarkRetarget10kx10(b *testing.B) {
	for _, bc := range []struct {
		name      string
		templated func(j int) bool
	}{
		{"shared-values", func(int) bool { return false }},
		{"half-templated", func(j int) bool { return j%2 == 0 }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := benchInput(10000, nil)
			bundles := make([]*fleet.Bundle, 10)
			for j := range bundles {
				values := map[string]interface{}{"replicas": int64(j)}
				if bc.templated(j) {
					values = map[string]interface{}{"name": "${ .ClusterName }"}
				}
				bundles[j] = benchInput(0, values).Bundle
				bundles[j].Name = fmt.Sprintf("app-%d", j)
			}
			b.ReportAllocs()
			for b.Loop() {
				for _, bu := range bundles {
					in.Bundle = bu
					if _, err := Compute(in); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
