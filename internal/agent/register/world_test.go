package register

import (
	"context"
	"fmt"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/testenv"
)

// world is one cluster's registration set up on the package's API server
// as the manager prepares it: a workspace whose registration token may
// create ClusterRegistrations, a system registration namespace for the
// hand-over Secret, the cluster namespace with the cluster's
// ServiceAccount (which may list BundleDeployments there) and the
// agent's namespace. The same API server is manager and downstream.
type world struct {
	t                               *testing.T
	up                              *testenv.Cluster
	ws, sysNS, clusterNS, agentNS   string
	importToken                     string
	clusterName, clusterSA, tokenSA string
}

func newWorld(t *testing.T, ctx context.Context, prefix string) *world {
	t.Helper()
	w := &world{t: t, up: upstream(t), ws: prefix + "-ws", sysNS: prefix + "-sys", clusterNS: prefix + "-cluster",
		agentNS: prefix + "-agent", clusterName: "c1", clusterSA: "request-" + prefix, tokenSA: "import-token"}
	for _, ns := range []string{w.ws, w.sysNS, w.clusterNS, w.agentNS} {
		w.must(w.up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	w.serviceAccount(ctx, w.ws, w.tokenSA, rbacv1.PolicyRule{APIGroups: []string{fleet.GroupVersion.Group},
		Resources: []string{"clusterregistrations"}, Verbs: []string{"create"}})
	w.serviceAccount(ctx, w.clusterNS, w.clusterSA, rbacv1.PolicyRule{APIGroups: []string{fleet.GroupVersion.Group},
		Resources: []string{"bundledeployments"}, Verbs: []string{"get", "list", "watch"}})
	w.importToken = w.token(ctx, w.ws, w.tokenSA)
	return w
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

// serviceAccount creates ServiceAccount ns/name with a Role of rule.
func (w *world) serviceAccount(ctx context.Context, ns, name string, rule rbacv1.PolicyRule) {
	w.t.Helper()
	w.must(w.up.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}))
	w.grantRole(ctx, ns, name, name, rule)
}

func (w *world) grantRole(ctx context.Context, ns, name, sa string, rule rbacv1.PolicyRule) {
	w.t.Helper()
	w.must(w.up.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: []rbacv1.PolicyRule{rule}}))
	saNS := w.ws
	if sa == w.clusterSA {
		saNS = w.clusterNS
	}
	w.must(w.up.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: saNS}}}))
}

func (w *world) token(ctx context.Context, ns, sa string) string {
	w.t.Helper()
	tr := &authv1.TokenRequest{}
	w.must(w.up.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}, tr))
	return tr.Status.Token
}

// storeCredential stores the cluster's credential for host and ca, as an
// earlier registration left it in Secret fleet-agent.
func (w *world) storeCredential(ctx context.Context, host string, ca []byte) *Credential {
	w.t.Helper()
	cred := newCredential(host, ca, w.token(ctx, w.clusterNS, w.clusterSA))
	cred.DeploymentNamespace, cred.ClusterNamespace, cred.ClusterName = w.clusterNS, w.ws, w.clusterName
	w.must(Store(ctx, w.up.Client, w.agentNS, cred))
	return cred
}

// writeBootstrap writes Secret fleet-agent-bootstrap with a live
// registration token, as an import or the fleet-agent chart does.
func (w *world) writeBootstrap(ctx context.Context, url string, ca []byte) {
	w.t.Helper()
	w.must(w.up.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: BootstrapSecretName, Namespace: w.agentNS},
		Data: map[string][]byte{"apiServerURL": []byte(url), "apiServerCA": ca, "token": []byte(w.importToken),
			"tokenName": []byte("import-token"), "clusterNamespace": []byte(w.ws), "systemRegistrationNamespace": []byte(w.sysNS)}}))
}

// registrations are the ClusterRegistrations filed in the workspace.
func (w *world) registrations(ctx context.Context) []fleet.ClusterRegistration {
	w.t.Helper()
	var list fleet.ClusterRegistrationList
	w.must(w.up.Client.List(ctx, &list, client.InNamespace(w.ws)))
	return list.Items
}

// filed waits for the agent's one ClusterRegistration; false when Get
// returned before filing one.
func (w *world) filed(ctx context.Context, returned <-chan struct{}) (fleet.ClusterRegistration, bool) {
	w.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if regs := w.registrations(ctx); len(regs) == 1 {
			return regs[0], true
		}
		select {
		case <-returned:
			return fleet.ClusterRegistration{}, false
		case <-time.After(100 * time.Millisecond):
		}
	}
	w.t.Fatal("the agent filed no ClusterRegistration within a minute")
	return fleet.ClusterRegistration{}, false
}

// grant plays the manager granting registration reg the Secret way: a
// read grant for the registering token, then the hand-over Secret with a
// new token of the cluster's ServiceAccount.
func (w *world) grant(ctx context.Context, reg fleet.ClusterRegistration) {
	w.t.Helper()
	name := names.RegistrationSecretName(reg.Spec.ClientID, reg.Spec.ClientRandom)
	w.grantRole(ctx, w.sysNS, name, w.tokenSA, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"},
		Verbs: []string{"get", "list", "watch", "delete"}, ResourceNames: []string{name}})
	w.must(w.up.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.sysNS},
		StringData: map[string]string{"token": w.token(ctx, w.clusterNS, w.clusterSA), "deploymentNamespace": w.clusterNS,
			"clusterNamespace": w.ws, "clusterName": w.clusterName}}))
}

// getGranted runs Get while playing the manager that grants the one
// registration it files.
func (w *world) getGranted(ctx context.Context) (*Credential, error) {
	w.t.Helper()
	type result struct {
		cred *Credential
		err  error
	}
	done, returned := make(chan result, 1), make(chan struct{})
	go func() {
		cred, err := Get(ctx, Options{Downstream: w.up.Client, Namespace: w.agentNS, PollInterval: 100 * time.Millisecond, Timeout: time.Minute})
		done <- result{cred, err}
		close(returned)
	}()
	reg, ok := w.filed(ctx, returned)
	if !ok {
		r := <-done
		if r.err != nil {
			return nil, fmt.Errorf("Get filed no registration and failed: %w", r.err)
		}
		return nil, fmt.Errorf("Get filed no registration and returned the credential for %s", r.cred.Host)
	}
	w.grant(ctx, reg)
	select {
	case r := <-done:
		return r.cred, r.err
	case <-time.After(90 * time.Second):
		return nil, fmt.Errorf("Get did not return within 90s of the grant")
	}
}

// storedServer is the API server URL and CA of the stored Secret fleet-agent.
func (w *world) storedServer(ctx context.Context) (string, []byte) {
	w.t.Helper()
	s := &corev1.Secret{}
	w.must(w.up.Client.Get(ctx, client.ObjectKey{Namespace: w.agentNS, Name: AgentSecretName}, s))
	kc, err := clientcmd.Load(s.Data[KeyKubeconfig])
	w.must(err)
	cl := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
	return cl.Server, cl.CertificateAuthorityData
}

// bootstrapErr is the error of reading Secret fleet-agent-bootstrap.
func (w *world) bootstrapErr(ctx context.Context) error {
	return w.up.Client.Get(ctx, client.ObjectKey{Namespace: w.agentNS, Name: BootstrapSecretName}, &corev1.Secret{})
}
