package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// agentStatusClient is a credential of cluster name's agent as
// registration grants it in the workspace: patch the status of its own
// Cluster (the rule of registration's grant, internal/registration/rbac.go).
func agentStatusClient(t *testing.T, ctx context.Context, ws, clusterNS, name string) client.Client {
	t.Helper()
	sa := "agent-" + name
	c := agentCredential(t, ctx, clusterNS, sa)
	must(t, env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: sa},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusters/status"},
			Verbs: []string{"patch"}, ResourceNames: []string{name}}}}))
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: sa},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: clusterNS, Name: sa}}}))
	return c
}

// TestRewrittenClusterNamespaceDeploysNothingElsewhere: agent A patches its
// Cluster's status.namespace to cluster B's namespace, then to
// kube-system, with its own credential. No registration runs here to set
// it back, which is the worst case for targeting: A's bundle never gets a
// BundleDeployment in B's namespace or in kube-system, A's own
// BundleDeployment stays where it is, B's deployment of the shared bundle
// is not touched (same object), and the bundle says why A gets nothing.
func TestRewrittenClusterNamespaceDeploysNothingElsewhere(t *testing.T) {
	ctx := context.Background()
	ws := "ws-nstamper"
	createNamespace(t, ctx, ws, nil)
	a := newCluster(t, ctx, ws, "a", map[string]string{"name": "a"}, time.Second)
	b := newCluster(t, ctx, ws, "b", map[string]string{"name": "b"}, time.Second)
	nsA, nsB := a.Status.Namespace, b.Status.Namespace
	mk := func(name string, target fleet.BundleTarget) {
		bu := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}
		bu.Spec.Resources = resources("kind: ConfigMap\nmetadata:\n  name: " + name + "\n")
		bu.Spec.Targets = []fleet.BundleTarget{target}
		must(t, env.Client.Create(ctx, bu))
	}
	mk("only-a", fleet.BundleTarget{ClusterName: "a"})
	mk("shared", fleet.BundleTarget{ClusterSelector: &metav1.LabelSelector{}})

	uid := func(ns, name string) (types.UID, error) {
		bd := &fleet.BundleDeployment{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, bd); err != nil {
			return "", err
		}
		return bd.UID, nil
	}
	before := map[string]types.UID{}
	eventually(t, 60*time.Second, func() error {
		for _, k := range []struct{ ns, name string }{{nsA, "only-a"}, {nsA, "shared"}, {nsB, "shared"}} {
			u, err := uid(k.ns, k.name)
			if err != nil {
				return err
			}
			before[k.ns+"/"+k.name] = u
		}
		return nil
	})

	agentA := agentStatusClient(t, ctx, ws, nsA, "a")
	for _, rewritten := range []string{nsB, "kube-system"} {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"namespace":"`+rewritten+`"}}`))
		eventually(t, 30*time.Second, func() error {
			return agentA.Status().Patch(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "a"}}, patch)
		})
		// The manager has seen it once the bundle says so.
		eventually(t, 60*time.Second, func() error {
			bu := &fleet.Bundle{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "only-a"}, bu); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(bu.Status.Conditions, fleet.ConditionReady)
			want := "status.namespace is not the cluster's namespace " + nsA
			if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, want) {
				return fmt.Errorf("bundle only-a Ready condition %+v, want False naming %q", cond, want)
			}
			if strings.Contains(cond.Message, rewritten) {
				return fmt.Errorf("bundle only-a Ready message %q repeats the value the agent wrote", cond.Message)
			}
			return nil
		})
		consistently(t, 5*time.Second, func() error {
			for key, want := range before {
				ns, name, _ := strings.Cut(key, "/")
				got, err := uid(ns, name)
				if err != nil || got != want {
					return fmt.Errorf("BundleDeployment %s: uid %s (%v), want the one from before %s", key, got, err, want)
				}
			}
			list := &fleet.BundleDeploymentList{}
			if err := env.Client.List(ctx, list, client.InNamespace(rewritten)); err != nil {
				return err
			}
			for _, bd := range list.Items {
				if bd.Labels[fleet.BundleNamespaceLabel] == ws && bd.Labels[fleet.ClusterLabel] == "a" || bd.Name == "only-a" {
					return fmt.Errorf("BundleDeployment %s/%s for cluster a in namespace %s", bd.Namespace, bd.Name, rewritten)
				}
			}
			return nil
		})
	}
}

// TestRewrittenClusterNamespaceHoldsNothingElsewhere: agent A claims
// cluster B's namespace and reports itself off schedule. A cluster off
// schedule keeps its untargeted BundleDeployments, but A is not the
// cluster of B's namespace: B's deployment of a bundle that stops
// targeting B still goes.
func TestRewrittenClusterNamespaceHoldsNothingElsewhere(t *testing.T) {
	ctx := context.Background()
	ws := "ws-nshold"
	createNamespace(t, ctx, ws, nil)
	a := newCluster(t, ctx, ws, "a", map[string]string{"name": "a"}, time.Second)
	b := newCluster(t, ctx, ws, "b", map[string]string{"name": "b"}, time.Second)
	nsA, nsB := a.Status.Namespace, b.Status.Namespace
	bu := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}}
	bu.Spec.Resources = resources("kind: ConfigMap\nmetadata:\n  name: app\n")
	bu.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}}
	must(t, env.Client.Create(ctx, bu))
	eventually(t, 60*time.Second, func() error {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: nsB, Name: "app"}, &fleet.BundleDeployment{})
	})

	agentA := agentStatusClient(t, ctx, ws, nsA, "a")
	patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"namespace":"`+nsB+`","scheduled":true,"activeSchedule":false}}`))
	eventually(t, 30*time.Second, func() error {
		return agentA.Status().Patch(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "a"}}, patch)
	})
	update(t, ctx, bu, false, func() { bu.Spec.Targets = []fleet.BundleTarget{{ClusterName: "a"}} })
	eventually(t, 60*time.Second, func() error {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: nsB, Name: "app"}, &fleet.BundleDeployment{})
		if err == nil {
			return fmt.Errorf("cluster b's deployment of bundle app is still there after app stopped targeting b")
		}
		return client.IgnoreNotFound(err)
	})
}
