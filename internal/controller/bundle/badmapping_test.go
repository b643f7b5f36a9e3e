package bundle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// TestInvalidBundleSelectorStallsOnlyBundlesAtRisk: a mapping's
// bundleSelector is edited into one that cannot be evaluated while its
// namespaceSelector selects a namespace holding a Cluster. The bundle
// deployed there through the mapping keeps its deployments and is
// Stalled; a bundle of the same namespace deployed only to its own
// namespace's clusters cannot lose anything and goes on reconciling
// (a spec change is rolled out), also once the namespaceSelector is
// broken too.
func TestInvalidBundleSelectorStallsOnlyBundlesAtRisk(t *testing.T) {
	ctx := context.Background()
	src, dst := "ws-badbsel-src", "ws-badbsel-dst"
	createNamespace(t, ctx, src, nil)
	createNamespace(t, ctx, dst, map[string]string{"team": "badbsel"})
	newCluster(t, ctx, dst, "far", nil, time.Second)
	newCluster(t, ctx, src, "near", nil, time.Second)
	m := &fleet.BundleNamespaceMapping{
		ObjectMeta:        metav1.ObjectMeta{Namespace: src, Name: "to-dst"},
		BundleSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "badbsel"}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "badbsel"}},
	}
	must(t, env.Client.Create(ctx, m))
	for name, lbls := range map[string]map[string]string{"mapped": {"app": "badbsel"}, "local": nil} {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: src, Name: name, Labels: lbls}}
		b.Spec.Resources = resources("k: v\n")
		b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}}
		must(t, env.Client.Create(ctx, b))
	}
	eventually(t, 60*time.Second, expectDeployedTo(ctx, src, "mapped", "far", "near"))
	eventually(t, 60*time.Second, expectDeployedTo(ctx, src, "local", "near"))

	update(t, ctx, m, false, func() { m.BundleSelector = unevaluable(map[string]string{"app": "badbsel"}) })
	expectStalled(t, ctx, src, "mapped", bundle.ReasonInvalidMapping,
		"BundleNamespaceMapping "+src+"/to-dst", "bundleSelector", "values set can't be empty")
	expectReconciled(t, ctx, src, "local", "k: v2\n")
	must(t, expectDeployedTo(ctx, src, "mapped", "far", "near")())

	update(t, ctx, m, false, func() { m.NamespaceSelector = unevaluable(map[string]string{"team": "badbsel"}) })
	expectStalled(t, ctx, src, "mapped", bundle.ReasonInvalidMapping, "bundleSelector")
	expectReconciled(t, ctx, src, "local", "k: v3\n")
	consistently(t, 3*time.Second, expectDeployedTo(ctx, src, "mapped", "far", "near"))
}

// expectReconciled changes the bundle's resources and waits until a pass
// of the new generation set Ready without stalling and the bundle still
// deploys to its cluster "near".
func expectReconciled(t *testing.T, ctx context.Context, ns, name, res string) {
	t.Helper()
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	update(t, ctx, b, false, func() { b.Spec.Resources = resources(res) })
	eventually(t, 60*time.Second, func() error {
		got := &fleet.Bundle{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, got); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionReady)
		if ready == nil || ready.ObservedGeneration != got.Generation {
			return fmt.Errorf("bundle %s: generation %d not reconciled yet: Ready %+v", name, got.Generation, ready)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			return fmt.Errorf("bundle %s stalled: %s", name, c.Message)
		}
		return expectDeployedTo(ctx, ns, name, "near")()
	})
}
