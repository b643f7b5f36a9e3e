package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/registration"
)

// credentialHandover checks, through the API server's aggregation layer,
// how the agent of cluster got its credential: from the manager's content
// API, with no hand-over Secret or read grant written; and that nobody else
// gets a registration's credential there: another registration token is
// refused by the manager, a cluster's own credential by RBAC, an
// anonymous caller by the API server; a refused registration's agent
// hears the manager's reason.
func credentialHandover(t *testing.T, ctx context.Context, ws string, cluster fleet.Cluster) {
	g := NewWithT(t)
	up := upstream.Client

	reg := registrationOf(t, ctx, ws, cluster)
	g.Expect(reg.Annotations).To(HaveKeyWithValue(contentapi.HandoverAnnotation, contentapi.HandoverContentAPI), "the agent asked for the content API hand-over")
	g.Expect(reg.Status.Granted).To(BeTrue())
	g.Expect(reg.Finalizers).To(ConsistOf(fleet.ClusterRegistrationFinalizer), "the agent set the manager's finalizer")
	g.Expect(reg.OwnerReferences).To(BeEmpty(), "the manager did not update the registration")
	secrets := &corev1.SecretList{}
	g.Expect(up.List(ctx, secrets, client.InNamespace(fleet.DefaultSystemRegistrationNamespace))).To(Succeed())
	for _, s := range secrets.Items {
		g.Expect(string(s.Type)).NotTo(Equal(fleet.SecretTypeAgentCredential), "hand-over Secret %s was written", s.Name)
	}
	roles := &rbacv1.RoleList{}
	g.Expect(up.List(ctx, roles, client.InNamespace(fleet.DefaultSystemRegistrationNamespace))).To(Succeed())
	for _, r := range roles.Items {
		g.Expect(r.Name).NotTo(HaveSuffix("-creds"), "read grant %s of a hand-over Secret was written", r.Name)
	}

	owner := tokenConfig(t, ctx, ws, reg.Labels[fleet.RegistrationTokenLabel])
	other := tokenConfig(t, ctx, ws, newTokenFor(t, ctx, ws, "e2e-other-token"))

	t.Run("another registration token: refused by the manager", func(t *testing.T) {
		typ, obj, err := watchCredential(ctx, other, ws, reg.Name)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		NewWithT(t).Expect(typ).To(Equal("ERROR"))
		NewWithT(t).Expect(string(obj)).To(ContainSubstring("only the registration token"))
		NewWithT(t).Expect(string(obj)).NotTo(ContainSubstring(`"token"`))
	})
	t.Run("the cluster's own credential: refused by RBAC (403)", func(t *testing.T) {
		_, _, err := watchCredential(ctx, agentConfig(t, ctx), ws, reg.Name)
		NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})
	t.Run("anonymous: refused", func(t *testing.T) {
		anon := rest.AnonymousClientConfig(owner)
		_, _, err := watchCredential(ctx, anon, ws, reg.Name)
		NewWithT(t).Expect(apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})
	t.Run("a refused registration hears why", func(t *testing.T) {
		tc, err := client.New(owner, client.Options{Scheme: upstream.Client.Scheme()})
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		bad := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "request-e2e-bad", Namespace: ws,
			Labels:      map[string]string{fleet.RegistrationTokenLabel: reg.Labels[fleet.RegistrationTokenLabel]},
			Annotations: map[string]string{contentapi.HandoverAnnotation: contentapi.HandoverContentAPI}},
			Spec: fleet.ClusterRegistrationSpec{ClientID: "e2e-bad"}}
		NewWithT(t).Expect(tc.Create(ctx, bad)).To(Succeed())
		typ, obj, err := watchCredential(ctx, owner, ws, bad.Name)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		NewWithT(t).Expect(typ).To(Equal("ERROR"))
		NewWithT(t).Expect(string(obj)).To(ContainSubstring("clientRandom"))
	})
}

// registrationOf is the ClusterRegistration the agent of cluster made.
func registrationOf(t *testing.T, ctx context.Context, ws string, cluster fleet.Cluster) *fleet.ClusterRegistration {
	t.Helper()
	regs := &fleet.ClusterRegistrationList{}
	NewWithT(t).Expect(upstream.Client.List(ctx, regs, client.InNamespace(ws))).To(Succeed())
	for i := range regs.Items {
		if regs.Items[i].Spec.ClientID == cluster.Spec.ClientID {
			return &regs.Items[i]
		}
	}
	t.Fatalf("no registration of cluster %s", cluster.Name)
	return nil
}

// agentConfig is the client config of the cluster credential the agent
// stored downstream.
func agentConfig(t *testing.T, ctx context.Context) *rest.Config {
	t.Helper()
	sec := &corev1.Secret{}
	NewWithT(t).Expect(downstream.Client.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemNamespace, Name: register.AgentSecretName}, sec)).To(Succeed())
	cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data[register.KeyKubeconfig])
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return cfg
}

// newTokenFor creates a ClusterRegistrationToken and returns its name.
func newTokenFor(t *testing.T, ctx context.Context, ws, name string) string {
	t.Helper()
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ws},
		Spec: fleet.ClusterRegistrationTokenSpec{TTL: &metav1.Duration{Duration: time.Hour}}}
	NewWithT(t).Expect(upstream.Client.Create(ctx, tok)).To(Succeed())
	return name
}

// tokenConfig is a client config of the registration token name, from the
// values its Secret holds (as a user installs them on a cluster).
func tokenConfig(t *testing.T, ctx context.Context, ws, name string) *rest.Config {
	t.Helper()
	var v registration.Values
	NewWithT(t).Eventually(func(g Gomega) {
		s := &corev1.Secret{}
		g.Expect(upstream.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: name}, s)).To(Succeed())
		g.Expect(yaml.Unmarshal(s.Data["values"], &v)).To(Succeed())
		g.Expect(v.Token).NotTo(BeEmpty())
	}, 60*time.Second, 250*time.Millisecond).Should(Succeed())
	return &rest.Config{Host: upstream.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: upstream.Config.CAData}, BearerToken: v.Token}
}

// watchCredential watches registration name's credential with cfg for at
// most 20 seconds and returns the first event's type and object, or the
// error that kept the watch from starting.
func watchCredential(ctx context.Context, cfg *rest.Config, ns, name string) (string, json.RawMessage, error) {
	rc, err := contentapi.NewRESTClient(cfg, nil)
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := rc.Get().AbsPath(contentapi.CredentialPath(ns)).Param("watch", "true").
		Param("fieldSelector", "metadata.name="+name).Param("timeoutSeconds", "20").Stream(ctx)
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = stream.Close() }()
	var ev metav1.WatchEvent
	if err := json.NewDecoder(stream).Decode(&ev); err != nil {
		return "", nil, err
	}
	return ev.Type, ev.Object.Raw, nil
}
