package bundle_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestRestrictionNamespaceSelectorPropagates: the GitRepoRestriction's
// allowedTargetNamespaceSelector reaches every BundleDeployment's options,
// replacing one the bundle set itself; an invalid selector stops the bundle
// with a clear condition and leaves its deployments alone; removing the
// restriction clears the selector.
func TestRestrictionNamespaceSelectorPropagates(t *testing.T) {
	ctx := context.Background()
	ws := "ws-nssel"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "c1", nil, time.Second)
	newCluster(t, ctx, ws, "c2", nil, time.Second)
	want := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	must(t, env.Client.Create(ctx, &fleet.GitRepoRestriction{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "r"}, AllowedTargetNamespaceSelector: want,
	}))
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}}
	b.Spec.Resources = resources("kind: ConfigMap\n")
	b.Spec.DefaultNamespace = "app"
	b.Spec.AllowedTargetNamespaceSelector = &metav1.LabelSelector{} // a bundle trying to allow everything
	b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	must(t, env.Client.Create(ctx, b))

	selectors := func(wantSel *metav1.LabelSelector) func() error {
		return func() error {
			bds, err := bundleDeployments(ctx, ws, "app")
			if err != nil {
				return err
			}
			if len(bds) != 2 {
				return fmt.Errorf("%d deployments, want 2", len(bds))
			}
			for cl, bd := range bds {
				if got := bd.Spec.Options.AllowedTargetNamespaceSelector; !reflect.DeepEqual(got, wantSel) {
					return fmt.Errorf("%s: selector %v, want %v", cl, got, wantSel)
				}
			}
			return nil
		}
	}
	eventually(t, 60*time.Second, selectors(want))
	before, err := bundleDeployments(ctx, ws, "app")
	must(t, err)

	// An invalid selector (sorting first by name) stops the bundle.
	bad := &fleet.GitRepoRestriction{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "a-bad"},
		AllowedTargetNamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}}}
	must(t, env.Client.Create(ctx, bad))
	eventually(t, 60*time.Second, func() error {
		cur := &fleet.Bundle{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			return err
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "GitRepoRestriction a-bad: invalid allowedTargetNamespaceSelector") {
			return fmt.Errorf("ready condition %+v", c)
		}
		return nil
	})
	consistently(t, 3*time.Second, func() error {
		bds, err := bundleDeployments(ctx, ws, "app")
		if err != nil {
			return err
		}
		for cl, bd := range before {
			if bds[cl] == nil || bds[cl].Spec.DeploymentID != bd.Spec.DeploymentID {
				return fmt.Errorf("%s deployment changed or removed while the restriction is invalid", cl)
			}
		}
		return nil
	})

	// Without restrictions the selector is cleared (the bundle's own is ignored).
	must(t, env.Client.Delete(ctx, bad))
	must(t, env.Client.Delete(ctx, &fleet.GitRepoRestriction{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "r"}}))
	eventually(t, 60*time.Second, selectors(nil))
}
