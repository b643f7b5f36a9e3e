package harness

import (
	"context"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/testenv"
)

// agentKubeconfig writes a kubeconfig for the simulated agents' downstream
// client that authenticates as a cluster-admin ServiceAccount with a bound
// token, as a real agent does inside its cluster. The test environment's
// admin credential is a client certificate, which the API server verifies
// (an ECDSA signature) on every request: a tenth of the downstream API
// server's CPU in a real-apply rollout, a cost no real agent pays.
func agentKubeconfig(ctx context.Context, down *testenv.Cluster, dir string) (string, error) {
	const ns, name = "cattle-fleet-system", "fleet-agent-simulators"
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}},
	} {
		if err := down.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	day := int64(24 * 60 * 60)
	tr, err := down.Clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &day}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	cfg := rest.AnonymousClientConfig(down.Config)
	cfg.BearerToken = tr.Status.Token
	path := filepath.Join(dir, "downstream-agents.kubeconfig")
	return path, testenv.WriteKubeconfig(path, cfg, "downstream")
}
