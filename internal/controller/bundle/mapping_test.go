package bundle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// A BundleNamespaceMapping lets selected bundles reach clusters of other
// namespaces; changing the namespace's labels takes them away again.
func TestBundleNamespaceMapping(t *testing.T) {
	ctx := context.Background()
	src, dst := "ws-bnm-src", "ws-bnm-dst"
	createNamespace(t, ctx, src, nil)
	createNamespace(t, ctx, dst, map[string]string{"team": "dst"})
	newCluster(t, ctx, dst, "far", nil, time.Second)
	newCluster(t, ctx, src, "near", nil, time.Second)
	must(t, env.Client.Create(ctx, &fleet.BundleNamespaceMapping{
		ObjectMeta:        metav1.ObjectMeta{Namespace: src, Name: "to-dst"},
		BundleSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "dst"}},
	}))
	for name, lbls := range map[string]map[string]string{"mapped": {"app": "x"}, "local": nil} {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: src, Name: name, Labels: lbls}}
		b.Spec.Resources = resources("k: v\n")
		b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}}
		must(t, env.Client.Create(ctx, b))
	}
	expect := func(want map[string][]string) func() error {
		return func() error {
			for name, clusters := range want {
				bds, err := bundleDeployments(ctx, src, name)
				if err != nil {
					return err
				}
				if fmt.Sprint(sortedKeys(bds)) != fmt.Sprint(clusters) {
					return fmt.Errorf("bundle %s deploys to %v, want %v", name, sortedKeys(bds), clusters)
				}
			}
			return nil
		}
	}
	eventually(t, 60*time.Second, expect(map[string][]string{"mapped": {"far", "near"}, "local": {"near"}}))

	ns := &corev1.Namespace{}
	must(t, env.Client.Get(ctx, types.NamespacedName{Name: dst}, ns))
	ns.Labels["team"] = "other"
	must(t, env.Client.Update(ctx, ns))
	eventually(t, 60*time.Second, expect(map[string][]string{"mapped": {"near"}, "local": {"near"}}))
}
