package registration_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/registration"
)

// Two Clusters whose namespace names are the same: names.ClusterNamespace
// cuts long names to 57 characters and a 5-hex hash (Rancher's naming,
// kept for compatibility), and these two agree on both.
const (
	collideWorkspaceA = "team-a-prod"
	collideClusterA   = "eu-west-1-production-cluster-0001"
	collideWorkspaceB = "team-a"
	collideClusterB   = "prod-eu-west-1-production-cluster-0001-0b519be3a"
)

// TestClusterNamespaceConflict: a Cluster whose namespace belongs to
// another Cluster is refused it. It gets a NamespaceConflict condition and
// an Event, no namespace in its status and no credential there (its agent
// would read the other cluster's Secrets and BundleDeployments); the
// namespace stays the first cluster's, also when the refused Cluster is
// deleted.
func TestClusterNamespaceConflict(t *testing.T) {
	ctx := context.Background()
	ns := names.ClusterNamespace(collideWorkspaceA, collideClusterA)
	if other := names.ClusterNamespace(collideWorkspaceB, collideClusterB); other != ns {
		t.Fatalf("the clusters do not collide: %s and %s", ns, other)
	}

	owner := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: collideClusterA, Namespace: collideWorkspaceA}}
	if err := up.Client.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first cluster has its namespace", func() error {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(owner), owner); err != nil {
			return err
		}
		if owner.Status.Namespace != ns {
			return fmt.Errorf("status.namespace %q", owner.Status.Namespace)
		}
		return nil
	})
	before := &corev1.Namespace{}
	if err := up.Client.Get(ctx, client.ObjectKey{Name: ns}, before); err != nil {
		t.Fatal(err)
	}

	// A grant for the second cluster in that namespace, as a manager that
	// did not check the namespace's owner left it: refusing the cluster
	// revokes it.
	staleLabels := map[string]string{fleet.ClusterLabel: collideClusterB, fleet.ClusterNamespaceLabel: collideWorkspaceB}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "stale-agent", Namespace: ns, Labels: staleLabels}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "stale-agent", Namespace: ns, Labels: staleLabels}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "stale-agent", Namespace: ns, Labels: staleLabels},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "stale-agent"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "stale-agent", Namespace: ns}}},
	} {
		if err := up.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// The second one has an agent that registers.
	const clientID = "colliding-agent"
	refused := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: collideClusterB, Namespace: collideWorkspaceB}, Spec: fleet.ClusterSpec{ClientID: clientID}}
	if err := up.Client.Create(ctx, refused); err != nil {
		t.Fatal(err)
	}
	v := newToken(t, collideWorkspaceB, "collide-token", time.Hour)
	reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: collideWorkspaceB,
		Labels: map[string]string{fleet.RegistrationTokenLabel: "collide-token"}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: "r1"}}
	if err := clientFor(t, tokenConfig(v)).Create(ctx, reg); err != nil {
		t.Fatal(err)
	}

	eventually(t, "the second cluster is refused the namespace", func() error {
		got := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(refused), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionProcessed)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != registration.ReasonNamespaceConflict {
			return fmt.Errorf("conditions %+v", got.Status.Conditions)
		}
		if got.Status.Namespace != "" {
			return fmt.Errorf("status.namespace %q", got.Status.Namespace)
		}
		return nil
	})
	waitEvent(t, up, collideWorkspaceB, registration.ReasonNamespaceConflict, collideWorkspaceA+"/"+collideClusterA)

	// Give the registration the time it takes to be granted.
	time.Sleep(3 * time.Second)
	got := &fleet.ClusterRegistration{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(reg), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Granted {
		t.Errorf("registration of the refused cluster granted")
	}
	wantNoCredentialOf(t, ns, collideWorkspaceB, collideClusterB)
	wantNamespaceOf(t, before)

	if err := up.Client.Delete(ctx, refused); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the refused cluster is deleted", func() error {
		err := up.Client.Get(ctx, client.ObjectKeyFromObject(refused), &fleet.Cluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	wantNamespaceOf(t, before)
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(owner), owner); err != nil {
		t.Fatal(err)
	}
	if owner.Status.Namespace != ns {
		t.Errorf("first cluster's status.namespace %q, want %s", owner.Status.Namespace, ns)
	}
}

// TestPrecreatedNamespaceAdopted: a namespace with the name of a
// Cluster's namespace that names no cluster (an operator created it ahead,
// with quotas or labels of their own) is the Cluster's: it is annotated
// with the cluster, keeps its own labels, and goes with the Cluster, as in
// Rancher Fleet.
func TestPrecreatedNamespaceAdopted(t *testing.T) {
	ctx := context.Background()
	const name = "precreated-ns-cluster"
	pre := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names.ClusterNamespace(workspace, name), Labels: map[string]string{"team": "x"}}}
	if err := up.Client.Create(ctx, pre); err != nil {
		t.Fatal(err)
	}
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workspace}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cluster has the namespace", func() error {
		got := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), got); err != nil {
			return err
		}
		if got.Status.Namespace != pre.Name {
			return fmt.Errorf("namespace %q, conditions %+v", got.Status.Namespace, got.Status.Conditions)
		}
		return nil
	})
	have := &corev1.Namespace{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(pre), have); err != nil {
		t.Fatal(err)
	}
	if have.UID != pre.UID || have.Labels["team"] != "x" ||
		have.Annotations[fleet.ClusterLabel] != name || have.Annotations[fleet.ClusterNamespaceLabel] != workspace {
		t.Errorf("adopted namespace: uid %s (was %s), labels %v, annotations %v", have.UID, pre.UID, have.Labels, have.Annotations)
	}
	if err := up.Client.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the namespace goes with the cluster", func() error {
		ns := &corev1.Namespace{}
		err := up.Client.Get(ctx, client.ObjectKeyFromObject(pre), ns)
		if apierrors.IsNotFound(err) || (err == nil && !ns.DeletionTimestamp.IsZero()) {
			return nil
		}
		return fmt.Errorf("namespace still there: %v", err)
	})
}

// wantNamespaceOf asserts that the namespace want still exists, not
// terminating, with the same labels and annotations.
func wantNamespaceOf(t *testing.T, want *corev1.Namespace) {
	t.Helper()
	have := &corev1.Namespace{}
	if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(want), have); err != nil {
		t.Fatalf("namespace %s: %v", want.Name, err)
	}
	if have.UID != want.UID || !have.DeletionTimestamp.IsZero() {
		t.Errorf("namespace %s deleted (uid %s, was %s; deletion %v)", want.Name, have.UID, want.UID, have.DeletionTimestamp)
	}
	if !maps.Equal(have.Annotations, want.Annotations) || !maps.Equal(have.Labels, want.Labels) {
		t.Errorf("namespace %s changed: labels %v, annotations %v; want %v, %v", want.Name, have.Labels, have.Annotations, want.Labels, want.Annotations)
	}
}

// wantNoCredentialOf asserts that ns holds no ServiceAccount, Role or
// RoleBinding made for the cluster ws/name.
func wantNoCredentialOf(t *testing.T, ns, ws, name string) {
	t.Helper()
	ctx := context.Background()
	sel := client.MatchingLabels{fleet.ClusterLabel: name, fleet.ClusterNamespaceLabel: ws}
	for _, list := range []client.ObjectList{&corev1.ServiceAccountList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}} {
		if err := up.Client.List(ctx, list, client.InNamespace(ns), sel); err != nil {
			t.Fatal(err)
		}
		if n := meta.LenList(list); n != 0 {
			t.Errorf("%T: %d objects for cluster %s/%s in %s", list, n, ws, name, ns)
		}
	}
}
