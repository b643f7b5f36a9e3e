package register

import (
	"context"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestStoredCredentialForgetsBootstrap: an agent starts with a stored
// credential the manager (here a real API server) accepts and, next to it,
// a fleet-agent-bootstrap Secret with a live registration token, as a
// re-import or a `helm upgrade` of the fleet-agent chart writes it. It
// goes on with the stored credential and deletes the bootstrap Secret, so
// that the token is not left readable in the cluster.
func TestStoredCredentialForgetsBootstrap(t *testing.T) {
	up := upstream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const clusterNS, agentNS, sa = "forget-cluster-ns", "forget-agent", "request-forget"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{clusterNS, agentNS} {
		must(up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	// The cluster's credential, as the manager grants it: a ServiceAccount
	// that may list BundleDeployments in the cluster namespace.
	must(up.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: clusterNS}}))
	must(up.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: clusterNS},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"bundledeployments"}, Verbs: []string{"get", "list", "watch"}}}}))
	must(up.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: clusterNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: clusterNS}}}))
	tr := &authv1.TokenRequest{}
	must(up.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: clusterNS}}, tr))
	cred := newCredential(up.Config.Host, up.Config.CAData, tr.Status.Token)
	cred.DeploymentNamespace, cred.ClusterNamespace, cred.ClusterName = clusterNS, "ws", "c1"
	must(Store(ctx, up.Client, agentNS, cred))
	must(up.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: BootstrapSecretName, Namespace: agentNS},
		Data: map[string][]byte{"apiServerURL": []byte(up.Config.Host), "token": []byte("live-registration-token"),
			"tokenName": []byte("import-token"), "clusterNamespace": []byte("ws")}}))

	got, err := Get(ctx, Options{Downstream: up.Client, Namespace: agentNS})
	if err != nil {
		t.Fatalf("Get with a valid stored credential: %v", err)
	}
	if got.Token() != cred.Token() || got.DeploymentNamespace != clusterNS || got.ClusterName != "c1" {
		t.Errorf("Get returned another credential: namespace %q, cluster %q, same token %v", got.DeploymentNamespace, got.ClusterName, got.Token() == cred.Token())
	}
	err = up.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: BootstrapSecretName}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the bootstrap secret is still there next to the accepted credential: %v", err)
	}
	// The agent still works: the stored credential stays and is accepted,
	// also without a bootstrap Secret.
	must(up.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: AgentSecretName}, &corev1.Secret{}))
	again, err := Get(ctx, Options{Downstream: up.Client, Namespace: agentNS})
	if err != nil || again.Token() != cred.Token() {
		t.Fatalf("second start: %v", err)
	}
	if err := Check(ctx, again); err != nil {
		t.Errorf("the stored credential no longer works: %v", err)
	}
}
