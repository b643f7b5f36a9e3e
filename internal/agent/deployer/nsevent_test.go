package deployer

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// A namespace deleteNamespace may not delete, the bundle's serviceAccount
// lacking the right, is kept, and why is recorded downstream as a Warning
// Event on it, naming the identity that was refused: the release is gone,
// so nothing retries and a log line would be the only trace.
func TestDeleteNamespaceRefusalEvent(t *testing.T) {
	ctx := context.Background()
	cs := downstream(t).Clientset
	const ns, sa, name = "nsevent-kept", "nsevent-keeper", "nsevent"
	grantConfigMapsOnly(t, cs, ns, sa)
	d := newTestDeployer(t)
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, ServiceAccount: sa, DeleteNamespace: true}
	if _, err := deployFiles(t, d, name, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept}\n"}, opts); err != nil {
		t.Fatal(err)
	}
	err := d.Uninstall(ctx, UninstallInput{ReleaseName: name, Namespace: ns, BundleDeployment: name, DeleteNamespace: true})
	identity := "system:serviceaccount:" + testAgentNamespace + ":" + sa
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), identity) {
		t.Fatalf("uninstall: %v, want the refusal for %s", err, identity)
	}
	n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || n.DeletionTimestamp != nil {
		t.Fatalf("namespace %s: %v, deleting %v; want it kept", ns, err, n.DeletionTimestamp)
	}
	events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []corev1.Event
	for _, e := range events.Items {
		if e.Reason == NamespaceKeptReason {
			got = append(got, e)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d %s events in %s, want 1: %+v", len(got), NamespaceKeptReason, ns, events.Items)
	}
	e := got[0]
	if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Namespace" || e.InvolvedObject.Name != ns ||
		e.InvolvedObject.UID != n.UID || !strings.Contains(e.Message, identity) || !strings.Contains(e.Message, name) {
		t.Fatalf("event %+v, want a Warning on namespace %s naming release %s and %s", e, ns, name, identity)
	}
}

// grantConfigMapsOnly creates ns and the agent namespace's serviceAccount
// sa, which may deploy ConfigMaps into ns, store Helm releases there and
// read ns, but not delete it.
func grantConfigMapsOnly(t *testing.T, cs kubernetes.Interface, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	create := func(err error) {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	create(err)
	_, err = cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"*"}},
	}}, metav1.CreateOptions{})
	create(err)
	_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: testAgentNamespace}},
	}, metav1.CreateOptions{})
	create(err)
}
