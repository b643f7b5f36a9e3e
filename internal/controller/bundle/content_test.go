package bundle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/content"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/testenv"
)

func manifestID(t *testing.T, res []fleet.BundleResource) string {
	m, err := manifest.New(res)
	must(t, err)
	id, err := m.ID()
	must(t, err)
	return id
}

// agentClient returns a client authenticated as a ServiceAccount of nsA
// bound, as registration binds an agent, to fleet-content-<nsA>.
func agentClient(t *testing.T, ctx context.Context, clusterNS string) client.Client {
	t.Helper()
	return agentCredential(t, ctx, clusterNS, "agent")
}

// agentCredential creates ServiceAccount sa in clusterNS, bound as
// registration binds an agent to fleet-content-<clusterNS> and, when rules
// are given, to a Role of them in clusterNS; it returns a client with a
// token of sa.
func agentCredential(t *testing.T, ctx context.Context, clusterNS, sa string, rules ...rbacv1.PolicyRule) client.WithWatch {
	t.Helper()
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: clusterNS, Name: sa}}
	must(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: clusterNS, Name: sa}}))
	if len(rules) > 0 {
		must(t, env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: clusterNS, Name: sa}, Rules: rules}))
		must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: clusterNS, Name: sa},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa}, Subjects: subject}))
	}
	must(t, env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterNS + "-" + sa + "-content"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: content.RoleName(clusterNS)},
		Subjects:   subject,
	}))
	tr, err := env.Clientset.CoreV1().ServiceAccounts(clusterNS).CreateToken(ctx, sa, &authv1.TokenRequest{}, metav1.CreateOptions{})
	must(t, err)
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tr.Status.Token
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme})
	must(t, err)
	return c
}

func TestContentSharingRefCountAndRBAC(t *testing.T) {
	ctx := context.Background()
	ws := "ws-content"
	createNamespace(t, ctx, ws, nil)
	a := newCluster(t, ctx, ws, "a", map[string]string{"name": "a"}, time.Second)
	b := newCluster(t, ctx, ws, "b", map[string]string{"name": "b"}, time.Second)
	shared := resources("kind: ConfigMap\nmetadata:\n  name: shared\n")
	only := resources("kind: ConfigMap\nmetadata:\n  name: only-b\n")
	sharedID, onlyID := manifestID(t, shared), manifestID(t, only)
	mk := func(name string, res []fleet.BundleResource, targets ...fleet.BundleTarget) {
		bu := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}
		bu.Spec.Resources = res
		bu.Spec.Targets = targets
		must(t, env.Client.Create(ctx, bu))
	}
	mk("one", shared, fleet.BundleTarget{ClusterSelector: &metav1.LabelSelector{}})
	mk("two", shared, fleet.BundleTarget{ClusterName: "a"})
	mk("three", only, fleet.BundleTarget{ClusterName: "b"})

	eventually(t, 60*time.Second, func() error {
		c := &fleet.Content{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: sharedID}, c); err != nil {
			return err
		}
		if c.Status.ReferenceCount != 3 {
			return fmt.Errorf("shared content referenceCount %d, want 3", c.Status.ReferenceCount)
		}
		m, err := manifest.FromCompressed(c.Content)
		if err != nil || len(m.Resources) != 1 || m.Resources[0].Content != shared[0].Content {
			return fmt.Errorf("content payload wrong: %v", err)
		}
		list := &fleet.ContentList{}
		if err := env.Client.List(ctx, list); err != nil {
			return err
		}
		n := 0
		for _, x := range list.Items {
			if x.Name == sharedID || x.Name == onlyID {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("%d contents for 3 bundles with 2 distinct manifests", n)
		}
		for ns, want := range map[string][]string{a.Status.Namespace: {sharedID}, b.Status.Namespace: sortedKeys(map[string]bool{sharedID: true, onlyID: true})} {
			role := &rbacv1.ClusterRole{}
			if err := env.Client.Get(ctx, types.NamespacedName{Name: content.RoleName(ns)}, role); err != nil {
				return err
			}
			if len(role.Rules) != 1 || fmt.Sprint(role.Rules[0].ResourceNames) != fmt.Sprint(want) || fmt.Sprint(role.Rules[0].Verbs) != "[get]" {
				return fmt.Errorf("role %s rules %+v, want get on %v", role.Name, role.Rules, want)
			}
		}
		return nil
	})

	// The agent of cluster a reads its Content and nothing else.
	agentA := agentClient(t, ctx, a.Status.Namespace)
	eventually(t, 30*time.Second, func() error {
		return agentA.Get(ctx, types.NamespacedName{Name: sharedID}, &fleet.Content{})
	})
	err := agentA.Get(ctx, types.NamespacedName{Name: onlyID}, &fleet.Content{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("agent of a reading b's content: want 403, got %v", err)
	}
	if err := agentA.List(ctx, &fleet.ContentList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("agent listing contents: want 403, got %v", err)
	}

	// Deleting the last bundles using the shared content removes it and
	// the agent's access; the other content stays.
	for _, name := range []string{"one", "two"} {
		must(t, env.Client.Delete(ctx, &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}))
	}
	eventually(t, 60*time.Second, func() error {
		err := env.Client.Get(ctx, types.NamespacedName{Name: sharedID}, &fleet.Content{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("shared content still there: %v", err)
		}
		for _, name := range []string{"one", "two"} {
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: name}, &fleet.Bundle{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("bundle %s not finalized: %v", name, err)
			}
		}
		bds, err := bundleDeployments(ctx, ws, "one")
		if err != nil || len(bds) != 0 {
			return fmt.Errorf("deployments of deleted bundle remain: %d %v", len(bds), err)
		}
		role := &rbacv1.ClusterRole{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: content.RoleName(a.Status.Namespace)}, role); err != nil {
			return err
		}
		if len(role.Rules) != 0 {
			return fmt.Errorf("role of a still grants %+v", role.Rules)
		}
		return nil
	})
	consistently(t, 3*time.Second, func() error {
		return env.Client.Get(ctx, types.NamespacedName{Name: onlyID}, &fleet.Content{})
	})
	if err := agentA.Get(ctx, types.NamespacedName{Name: onlyID}, &fleet.Content{}); !apierrors.IsForbidden(err) {
		t.Fatalf("want 403 after removal, got %v", err)
	}
}
