package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
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

// TestSameNameThroughMapping: a BundleNamespaceMapping brings a bundle to a
// cluster where a bundle of the same name from the cluster's own workspace
// deploys too. Their deployments would share a name: the one written
// first keeps it, with its own values, and the other bundle says why it
// cannot deploy instead of staying Pending.
func TestSameNameThroughMapping(t *testing.T) {
	ctx := context.Background()
	src, dst := "ws-same-src", "ws-same-dst"
	createNamespace(t, ctx, src, nil)
	createNamespace(t, ctx, dst, map[string]string{"team": "same"})
	c := newCluster(t, ctx, dst, "shared", nil, time.Second)
	must(t, env.Client.Create(ctx, &fleet.BundleNamespaceMapping{
		ObjectMeta:        metav1.ObjectMeta{Namespace: src, Name: "to-dst"},
		BundleSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "same"}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "same"}},
	}))
	for _, ns := range []string{src, dst} {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "same", Labels: map[string]string{"app": "same"}}}
		b.Spec.Resources = resources("k: v\n")
		b.Spec.Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]any{"from": ns}}}
		b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}}
		must(t, env.Client.Create(ctx, b))
	}
	eventually(t, 60*time.Second, func() error {
		bd := &fleet.BundleDeployment{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: c.Status.Namespace, Name: "same"}, bd); err != nil {
			return err
		}
		winner := bd.Labels[fleet.BundleNamespaceLabel]
		loser := src
		if winner == src {
			loser = dst
		}
		lb := &fleet.Bundle{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: loser, Name: "same"}, lb); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(lb.Status.Conditions, fleet.ConditionReady)
		if cond == nil || cond.Reason != bundle.ReasonWriteFailed || !strings.Contains(cond.Message, "belongs to bundle "+winner+"/same") {
			return fmt.Errorf("bundle %s/same (deployment held by %s): conditions %+v", loser, winner, lb.Status.Conditions)
		}
		sec := &corev1.Secret{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: c.Status.Namespace, Name: "same"}, sec); err != nil {
			return err
		}
		for k, v := range sec.Data {
			if strings.Contains(string(v), loser) {
				return fmt.Errorf("values Secret key %s holds the other bundle's values: %s", k, v)
			}
		}
		return nil
	})
}
