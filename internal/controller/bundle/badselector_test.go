package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// unevaluable is a selector the API server accepts but that cannot be
// evaluated: operator In without values.
func unevaluable(lbls map[string]string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: lbls,
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn}}}
}

// expectStalled waits until the bundle is Ready=False and Stalled with
// reason and a message containing every one of parts.
func expectStalled(t *testing.T, ctx context.Context, ns, name, reason string, parts ...string) {
	t.Helper()
	eventually(t, 60*time.Second, func() error {
		b := &fleet.Bundle{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, b); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady)
		stalled := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionStalled)
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != reason ||
			stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != reason {
			return fmt.Errorf("bundle %s: Ready %+v, Stalled %+v; want both %s", name, ready, stalled, reason)
		}
		for _, p := range parts {
			if !strings.Contains(ready.Message, p) {
				return fmt.Errorf("bundle %s: Ready message %q lacks %q", name, ready.Message, p)
			}
		}
		return nil
	})
}

// expectNotStalled waits until the bundle is no longer Stalled.
func expectNotStalled(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	eventually(t, 60*time.Second, func() error {
		b := &fleet.Bundle{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, b); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			return fmt.Errorf("bundle %s still stalled: %s", name, c.Message)
		}
		return nil
	})
}

// expectDeployedTo checks that the bundle's deployments are exactly on
// clusters.
func expectDeployedTo(ctx context.Context, ns, name string, clusters ...string) func() error {
	return func() error {
		bds, err := bundleDeployments(ctx, ns, name)
		if err != nil {
			return err
		}
		if got := fmt.Sprint(sortedKeys(bds)); got != fmt.Sprint(clusters) {
			return fmt.Errorf("bundle %s deploys to %s, want %v", name, got, clusters)
		}
		return nil
	}
}

// TestInvalidClusterGroupKeepsDeployments: a ClusterGroup's selector is
// edited into one that cannot be evaluated. The bundle targeting the
// group keeps its deployment and is Stalled naming the group and the
// error, instead of deleting it and showing Ready 0/0; a bundle that does
// not target by group goes on as before. Fixing the group un-stalls it.
func TestInvalidClusterGroupKeepsDeployments(t *testing.T) {
	ctx := context.Background()
	ws := "ws-badgroup"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "a", map[string]string{"env": "prod"}, time.Second)
	g := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "prod"},
		Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}
	must(t, env.Client.Create(ctx, g))
	targets := map[string]fleet.BundleTarget{
		"by-group": {ClusterGroup: "prod"},
		"by-label": {ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
	}
	for name, tg := range targets {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}
		b.Spec.Resources = resources("kind: ConfigMap\nmetadata:\n  name: " + name + "\n")
		b.Spec.Targets = []fleet.BundleTarget{tg}
		must(t, env.Client.Create(ctx, b))
	}
	for name := range targets {
		eventually(t, 60*time.Second, expectDeployedTo(ctx, ws, name, "a"))
	}

	update(t, ctx, g, false, func() { g.Spec.Selector = unevaluable(map[string]string{"env": "prod"}) })
	expectStalled(t, ctx, ws, "by-group", bundle.ReasonInvalidClusterGroup,
		"ClusterGroup "+ws+"/prod", "values set can't be empty", "cluster "+ws+"/a")
	// The status is written after the deletions of the same pass: what
	// is there now is what the pass left, and later passes hold too.
	consistently(t, 3*time.Second, expectDeployedTo(ctx, ws, "by-group", "a"))
	must(t, expectDeployedTo(ctx, ws, "by-label", "a")())
	b := &fleet.Bundle{}
	must(t, env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "by-label"}, b))
	if c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("bundle not targeting by group is stalled: %s", c.Message)
	}

	update(t, ctx, g, false, func() { g.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}} })
	expectNotStalled(t, ctx, ws, "by-group")
	must(t, expectDeployedTo(ctx, ws, "by-group", "a")())
}

// TestInvalidMappingKeepsDeployments: a BundleNamespaceMapping that maps
// a namespace to a bundle gets a namespaceSelector that cannot be
// evaluated. The bundle keeps its deployment on the mapped cluster and is
// Stalled naming the mapping.
func TestInvalidMappingKeepsDeployments(t *testing.T) {
	ctx := context.Background()
	src, dst := "ws-badmap-src", "ws-badmap-dst"
	createNamespace(t, ctx, src, nil)
	createNamespace(t, ctx, dst, map[string]string{"team": "badmap"})
	newCluster(t, ctx, dst, "far", nil, time.Second)
	m := &fleet.BundleNamespaceMapping{
		ObjectMeta:        metav1.ObjectMeta{Namespace: src, Name: "to-dst"},
		BundleSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "badmap"}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "badmap"}},
	}
	must(t, env.Client.Create(ctx, m))
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: src, Name: "mapped", Labels: map[string]string{"app": "badmap"}}}
	b.Spec.Resources = resources("k: v\n")
	b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}}
	must(t, env.Client.Create(ctx, b))
	eventually(t, 60*time.Second, expectDeployedTo(ctx, src, "mapped", "far"))

	update(t, ctx, m, false, func() { m.NamespaceSelector = unevaluable(map[string]string{"team": "badmap"}) })
	expectStalled(t, ctx, src, "mapped", bundle.ReasonInvalidMapping,
		"BundleNamespaceMapping "+src+"/to-dst", "namespaceSelector", "values set can't be empty")
	consistently(t, 3*time.Second, expectDeployedTo(ctx, src, "mapped", "far"))
}
