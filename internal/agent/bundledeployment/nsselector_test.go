package bundledeployment_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

// waitNamespaceRefused waits until the BundleDeployment is ErrApplied with a
// Deployed=False and Ready=False condition whose message contains all of want.
func waitNamespaceRefused(t *testing.T, name string, want ...string) *fleet.BundleDeployment {
	t.Helper()
	var bd *fleet.BundleDeployment
	eventually(t, name+" error "+strings.Join(want, ", "), func() error {
		bd = getBD(t, name)
		for _, typ := range []string{fleet.ConditionDeployed, fleet.ConditionReady} {
			c := meta.FindStatusCondition(bd.Status.Conditions, typ)
			if c == nil || c.Status != metav1.ConditionFalse {
				return fmt.Errorf("%s condition %+v", typ, c)
			}
			for _, w := range want {
				if !strings.Contains(c.Message, w) {
					return fmt.Errorf("%s message %q lacks %q", typ, c.Message, w)
				}
			}
		}
		if s := bundledeployment.State(bd); s != fleet.ErrApplied {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	return bd
}

func namespaceAbsent(t *testing.T, name string) {
	t.Helper()
	err := down.Client.Get(context.Background(), client.ObjectKey{Name: name}, &corev1.Namespace{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("namespace %s: want NotFound, got %v", name, err)
	}
}

// TestAllowedTargetNamespaceSelector: with the GitRepoRestrictions'
// selector on the options, the agent deploys only into an existing
// namespace whose labels match. A missing namespace is not created (not even
// for downstreamResources), and the bundle's own namespaceLabels cannot make a
// namespace match; once an operator labels the namespace, the agent's backoff
// retry deploys.
func TestAllowedTargetNamespaceSelector(t *testing.T) {
	ctx := context.Background()
	const ns = "nssel-team"
	cmSrc := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nssel-shared", Namespace: clusterNS}, Data: map[string]string{"k": "v"}}
	must(t, up.Client.Create(ctx, cmSrc))
	b := bundle{
		name:  "nssel",
		files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nssel-cm\ndata:\n  a: b\n"},
		opts: fleet.BundleDeploymentOptions{
			DefaultNamespace:               ns,
			NamespaceLabels:                map[string]string{"team": "a"},
			DownstreamResources:            []fleet.DownstreamResource{{Kind: "ConfigMap", Name: "nssel-shared"}},
			AllowedTargetNamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		},
	}
	id := put(t, b)

	// 1. Missing namespace: error naming namespace and selector; not created.
	bd := waitNamespaceRefused(t, "nssel", `target namespace "nssel-team" does not exist`, "team=a")
	if bd.Status.AppliedDeploymentID == id {
		t.Fatalf("applied %s although the namespace is missing", id)
	}
	namespaceAbsent(t, ns)

	// 2. Existing namespace with the wrong labels: not deployed, not relabelled.
	must(t, down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "b"}}}))
	bd = waitNamespaceRefused(t, "nssel", `target namespace "nssel-team" does not match allowedTargetNamespaceSelector "team=a"`)
	if bd.Status.AppliedDeploymentID == id {
		t.Fatalf("applied %s although the namespace does not match", id)
	}
	if _, err := configMap(t, ns, "nssel-cm"); !apierrors.IsNotFound(err) {
		t.Fatalf("bundle object deployed into a non-matching namespace: %v", err)
	}
	if _, err := configMap(t, ns, "nssel-shared"); !apierrors.IsNotFound(err) {
		t.Fatalf("downstream resource copied into a non-matching namespace: %v", err)
	}
	cur := &corev1.Namespace{}
	must(t, down.Client.Get(ctx, client.ObjectKey{Name: ns}, cur))
	if cur.Labels["team"] != "b" {
		t.Fatalf("namespace relabelled by the bundle: %v", cur.Labels)
	}

	// 3. The operator labels it: the next retry deploys.
	cur.Labels["team"] = "a"
	must(t, down.Client.Update(ctx, cur))
	waitState(t, "nssel", id, fleet.Ready)
	wantData(t, ns, "nssel-cm", "a", "b")
	wantData(t, ns, "nssel-shared", "k", "v")
}

// TestNamespaceSelectorKeepsDeployedRelease: adding a restriction whose
// selector the namespace does not match stops the upgrade with an error but
// removes nothing that is already deployed.
func TestNamespaceSelectorKeepsDeployedRelease(t *testing.T) {
	b := bundle{
		name:  "nsselkeep",
		files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keep-cm\ndata:\n  a: b\n"},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "nsselkeep-ns"},
	}
	first := put(t, b)
	waitState(t, "nsselkeep", first, fleet.Ready)

	b.opts.AllowedTargetNamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "fleet-allowed", Operator: metav1.LabelSelectorOpExists},
	}}
	second := put(t, b)
	if second == first {
		t.Fatal("the selector must change the deploymentID")
	}
	bd := waitNamespaceRefused(t, "nsselkeep", `target namespace "nsselkeep-ns" does not match`, "fleet-allowed")
	if bd.Status.AppliedDeploymentID != first {
		t.Fatalf("applied %q, want the first deployment %q kept", bd.Status.AppliedDeploymentID, first)
	}
	wantData(t, "nsselkeep-ns", "keep-cm", "a", "b")
}
