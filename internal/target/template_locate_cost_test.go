package target

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// locateBundle is a bundle with 19 values templated on the cluster name, a
// plain secret and one more templated value, "zz", which sorts last, so
// that finding it takes the longest search. extra is merged into values.
func locateBundle(zz string, extra map[string]interface{}) *fleet.Bundle {
	v := map[string]interface{}{"password": secret, "zz": zz}
	for i := range 19 {
		v[fmt.Sprintf("v%02d", i)] = "${ .ClusterName }"
	}
	for k, x := range extra {
		v[k] = x
	}
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app"}}
	b.Spec.Helm = &fleet.HelmOptions{Values: values(v)}
	b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	return b
}

// locateClusters are n clusters whose cluster values are clusterValues(i);
// each has an "id" label with its own name.
func locateClusters(n int, clusterValues func(i int, name string) map[string]interface{}) []ClusterInfo {
	out := make([]ClusterInfo, 0, n)
	for i := range n {
		name := fmt.Sprintf("c-%04d", i)
		c := cluster(name, withLabels("id", name))
		if clusterValues != nil {
			c.Spec.TemplateValues = values(clusterValues(i, name))
		}
		out = append(out, ClusterInfo{Cluster: c})
	}
	return out
}

// computeCountingLocate runs one targeting pass and returns its targets and
// how many values documents locate rendered during it.
func computeCountingLocate(t *testing.T, b *fleet.Bundle, clusters []ClusterInfo) ([]*Target, int64) {
	t.Helper()
	before := locateRenders.Load()
	targets, err := Compute(Input{Bundle: b, ManifestID: "s-1", Clusters: clusters})
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) != len(clusters) {
		t.Fatalf("%d targets for %d clusters", len(targets), len(clusters))
	}
	return targets, locateRenders.Load() - before
}

// TestTemplateErrorLocateCostIsPerBundle: a bundle whose values template
// fails on every cluster must not pay the search for the failing value on
// each cluster. With 10,000 clusters and 20 templated values that was
// 200,000 extra renders of the values document per targeting pass, on
// every resync and cluster event. The errors whose Go text differs per
// cluster (a rendered output that is not YAML, a function error quoting
// the cluster's value) are the ones that were searched again for each
// cluster. The search count must be the same for 1,000 clusters as for 10,
// and every cluster's error must still name the value and quote nothing.
func TestTemplateErrorLocateCostIsPerBundle(t *testing.T) {
	cases := []struct {
		name          string
		zz            string
		extra         map[string]interface{}
		clusterValues func(i int, name string) map[string]interface{}
		wantKind      string
	}{
		{
			name: "rendered values are not YAML",
			zz:   "${ .ClusterValues.bad }",
			clusterValues: func(_ int, name string) map[string]interface{} {
				return map[string]interface{}{"bad": "{" + secret + "-" + name + ": 1}: 2"}
			},
			wantKind: "not valid YAML after templating",
		},
		{
			name: "function error quotes the cluster's value",
			zz:   `${ mustToDate "2006-01-02" .ClusterValues.date }`,
			clusterValues: func(_ int, name string) map[string]interface{} {
				return map[string]interface{}{"date": secret + "-" + name}
			},
			wantKind: "function mustToDate failed",
		},
		{
			name:     "missing key",
			zz:       "${ .ClusterValues.missing }",
			wantKind: "(no such key)",
		},
		{
			name:     "syntax error",
			zz:       "${ .ClusterName ",
			wantKind: "template syntax error",
		},
		{
			// The label reference puts each cluster's own name into its
			// values document, so no two clusters render the same text.
			name:     "values with a clusterLabels reference",
			zz:       "${ .ClusterValues.missing }",
			extra:    map[string]interface{}{"id": clusterLabelsPrefix + "id"},
			wantKind: "(no such key)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := locateBundle(tc.zz, tc.extra)
			_, few := computeCountingLocate(t, b, locateClusters(10, tc.clusterValues))
			targets, many := computeCountingLocate(t, b, locateClusters(1000, tc.clusterValues))
			// One search over the 20 templated values at most.
			if many > 20 || many != few {
				t.Errorf("locate rendered %d values documents for 1,000 clusters and %d for 10; want the same, at most 20", many, few)
			}
			for _, tg := range targets {
				if tg.Err == nil {
					t.Fatalf("cluster %s: no error", tg.Cluster.Name)
				}
				msg := tg.Err.Error()
				if strings.Contains(msg, secret) || strings.Contains(msg, tg.Cluster.Name) {
					t.Fatalf("cluster %s: error quotes a value: %s", tg.Cluster.Name, msg)
				}
				if !strings.HasPrefix(msg, "helm.values.zz: ") || !strings.Contains(msg, tc.wantKind) {
					t.Fatalf("cluster %s: error %q, want helm.values.zz and %q", tg.Cluster.Name, msg, tc.wantKind)
				}
			}
		})
	}
}

// TestTemplateErrorLocateCostIsCapped: when the failure itself differs on
// every cluster, nothing can be shared between clusters, so the search is
// capped per targeting pass; past the cap a cluster's error names only
// helm.values, and still quotes nothing. Here each cluster's value "aa"
// renders to a YAML block of its own length, so the rendered values break
// at "zz" on a different output line for each cluster.
func TestTemplateErrorLocateCostIsCapped(t *testing.T) {
	b := locateBundle("${ .ClusterValues.bad }", map[string]interface{}{"aa": "${ .ClusterValues.block }"})
	clusters := locateClusters(1000, func(i int, name string) map[string]interface{} {
		return map[string]interface{}{
			"block": "|\n" + strings.Repeat("  "+secret+"\n", i),
			"bad":   "{" + secret + "-" + name + ": 1}: 2",
		}
	})
	targets, n := computeCountingLocate(t, b, clusters)
	if n > maxLocateRendersPerPass {
		t.Errorf("locate rendered %d values documents in one pass, want at most %d", n, maxLocateRendersPerPass)
	}
	located := 0
	for _, tg := range targets {
		if tg.Err == nil {
			t.Fatalf("cluster %s: no error", tg.Cluster.Name)
		}
		msg := tg.Err.Error()
		if strings.Contains(msg, secret) || strings.Contains(msg, tg.Cluster.Name) {
			t.Fatalf("cluster %s: error quotes a value: %s", tg.Cluster.Name, msg)
		}
		switch {
		case strings.HasPrefix(msg, "helm.values.zz: "):
			located++
		case strings.HasPrefix(msg, "helm.values: "):
		default:
			t.Fatalf("cluster %s: error %q names neither helm.values.zz nor helm.values", tg.Cluster.Name, msg)
		}
		if !strings.Contains(msg, "not valid YAML after templating") {
			t.Fatalf("cluster %s: error %q does not say what failed", tg.Cluster.Name, msg)
		}
	}
	if located == 0 || located == len(targets) {
		t.Errorf("%d of %d clusters' errors name helm.values.zz; want the first searches to fit in the cap and the rest not", located, len(targets))
	}
}

// TestTemplateErrorLocateKeepsClustersApart: sharing one search between
// clusters must not blame a cluster's error on the value that failed for
// another. Even clusters break value a, odd clusters value b, the same way.
func TestTemplateErrorLocateKeepsClustersApart(t *testing.T) {
	cases := []struct {
		name          string
		a, b          string
		clusterValues func(i int, name string) map[string]interface{}
	}{
		{
			name: "function error",
			a:    `${ mustToDate "2006-01-02" .ClusterValues.a }`,
			b:    `${ mustToDate "2006-01-02" .ClusterValues.b }`,
			clusterValues: func(i int, name string) map[string]interface{} {
				if i%2 == 0 {
					return map[string]interface{}{"a": secret + name, "b": "2024-01-02"}
				}
				return map[string]interface{}{"a": "2024-01-02", "b": secret + name}
			},
		},
		{
			name: "not YAML",
			a:    "${ .ClusterValues.a }",
			b:    "${ .ClusterValues.b }",
			clusterValues: func(i int, name string) map[string]interface{} {
				bad := "{" + secret + name + ": 1}: 2"
				if i%2 == 0 {
					return map[string]interface{}{"a": bad, "b": "ok"}
				}
				return map[string]interface{}{"a": "ok", "b": bad}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := locateBundle("${ .ClusterName }", map[string]interface{}{"a": tc.a, "b": tc.b})
			targets, n := computeCountingLocate(t, b, locateClusters(200, tc.clusterValues))
			if n > 2*22 {
				t.Errorf("locate rendered %d values documents, want at most two searches of 22", n)
			}
			for _, tg := range targets {
				want := "helm.values.a: "
				if tg.Cluster.Name[len(tg.Cluster.Name)-1]%2 == 1 {
					want = "helm.values.b: "
				}
				if tg.Err == nil || !strings.HasPrefix(tg.Err.Error(), want) {
					t.Fatalf("cluster %s: error %v, want it to start with %q", tg.Cluster.Name, tg.Err, want)
				}
				if strings.Contains(tg.Err.Error(), secret) {
					t.Fatalf("cluster %s: error quotes a value: %s", tg.Cluster.Name, tg.Err)
				}
			}
		})
	}
}
