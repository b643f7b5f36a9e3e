package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// createNamespaceOf waits until the bundle has want deployments and returns
// their createNamespace options ("nil", "true", "false") by cluster.
func createNamespaceOf(ctx context.Context, ws, name string, want int) (map[string]string, error) {
	bds, err := bundleDeployments(ctx, ws, name)
	if err != nil {
		return nil, err
	}
	if len(bds) != want {
		return nil, fmt.Errorf("%d deployments, want %d", len(bds), want)
	}
	out := map[string]string{}
	for cl, bd := range bds {
		out[cl] = "nil"
		if v := bd.Spec.Options.CreateNamespace; v != nil {
			out[cl] = fmt.Sprint(*v)
		}
	}
	return out, nil
}

func allCreateNamespace(ctx context.Context, ws, name string, want int, value string) func() error {
	return func() error {
		got, err := createNamespaceOf(ctx, ws, name, want)
		if err != nil {
			return err
		}
		for cl, v := range got {
			if v != value {
				return fmt.Errorf("%s: createNamespace %s, want %s", cl, v, value)
			}
		}
		return nil
	}
}

// TestPolicyDisablesNamespaceCreation: requireServiceAccount without
// allowNamespaceCreation gives every BundleDeployment createNamespace=false,
// even where a target customization asks for true, with a new deployment
// ID so that agents act on it; allowNamespaceCreation in any Policy of the
// namespace, or no Policy, gives back the Bundle's own options.
func TestPolicyDisablesNamespaceCreation(t *testing.T) {
	ctx := context.Background()
	ws := "ws-policy-ns"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "c1", map[string]string{"env": "a"}, time.Second)
	newCluster(t, ctx, ws, "c2", map[string]string{"env": "b"}, time.Second)
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}}
	b.Spec.Resources = resources("kind: ConfigMap\n")
	b.Spec.ServiceAccount = "tenant"
	yes := true
	b.Spec.Targets = []fleet.BundleTarget{
		{Name: "a", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "a"}},
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{CreateNamespace: &yes}},
		{Name: "rest", ClusterSelector: &metav1.LabelSelector{}},
	}
	must(t, env.Client.Create(ctx, b))
	eventually(t, 60*time.Second, func() error {
		got, err := createNamespaceOf(ctx, ws, "app", 2)
		if err != nil {
			return err
		}
		if got["c1"] != "true" || got["c2"] != "nil" {
			return fmt.Errorf("createNamespace %v before any Policy", got)
		}
		return nil
	})
	before, err := bundleDeployments(ctx, ws, "app")
	must(t, err)

	// allowNamespaceCreation unset: off everywhere.
	policy := &fleet.Policy{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "tenant"}, RequireServiceAccount: true}
	must(t, env.Client.Create(ctx, policy))
	eventually(t, 60*time.Second, allCreateNamespace(ctx, ws, "app", 2, "false"))
	after, err := bundleDeployments(ctx, ws, "app")
	must(t, err)
	for cl, bd := range after {
		if bd.Spec.DeploymentID == before[cl].Spec.DeploymentID {
			t.Fatalf("%s: deployment ID unchanged (%s): the agent would not act", cl, bd.Spec.DeploymentID)
		}
	}

	// allowNamespaceCreation in another Policy: the Bundle's options again.
	other := &fleet.Policy{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "ops"}, AllowNamespaceCreation: true}
	must(t, env.Client.Create(ctx, other))
	eventually(t, 60*time.Second, func() error {
		got, err := createNamespaceOf(ctx, ws, "app", 2)
		if err != nil {
			return err
		}
		if got["c1"] != "true" || got["c2"] != "nil" {
			return fmt.Errorf("createNamespace %v with allowNamespaceCreation", got)
		}
		return nil
	})
}

// TestPolicyRefusesBundleServiceAccount: a Bundle without serviceAccount,
// or with a target's serviceAccount outside allowedServiceAccounts, is
// refused whole with a condition naming the Policy; its deployments stay.
func TestPolicyRefusesBundleServiceAccount(t *testing.T) {
	ctx := context.Background()
	ws := "ws-policy-sa"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "c1", nil, time.Second)
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}}
	b.Spec.Resources = resources("kind: ConfigMap\n")
	b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	must(t, env.Client.Create(ctx, b))
	eventually(t, 60*time.Second, allCreateNamespace(ctx, ws, "app", 1, "nil"))

	must(t, env.Client.Create(ctx, &fleet.Policy{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "tenant"},
		RequireServiceAccount: true, AllowNamespaceCreation: true, AllowedServiceAccounts: []string{"tenant"}}))
	refused := func(s string) func() error {
		return func() error {
			cur := &fleet.Bundle{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
				return err
			}
			c := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, s) {
				return fmt.Errorf("stalled = %+v", c)
			}
			return nil
		}
	}
	eventually(t, 60*time.Second, refused("serviceAccount is empty, and Policy tenant requires one"))
	consistently(t, 2*time.Second, allCreateNamespace(ctx, ws, "app", 1, "nil"))

	cur := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}}
	update(t, ctx, cur, false, func() {
		cur.Spec.ServiceAccount = "tenant"
		cur.Spec.Targets[0].ServiceAccount = "cluster-admin"
	})
	eventually(t, 60*time.Second, refused(`target all: serviceAccount "cluster-admin" is not allowed by Policy tenant`))
}
