package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/pki"
)

// contentAPIAccess checks, with the credential the agent of cluster got at
// registration, that the content API serves it exactly the Contents of its
// own BundleDeployments and nothing else, and that the manager gave it no
// cluster-wide binding at all.
func contentAPIAccess(t *testing.T, ctx context.Context, cluster fleet.Cluster) {
	g := NewWithT(t)
	up := upstream.Client
	ownNS := cluster.Status.Namespace

	sec := &corev1.Secret{}
	g.Expect(downstream.Client.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemNamespace, Name: register.AgentSecretName}, sec)).To(Succeed())
	agentCfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data[register.KeyKubeconfig])
	g.Expect(err).NotTo(HaveOccurred())
	agentContents, err := contentapi.NewReader(agentCfg, nil)
	g.Expect(err).NotTo(HaveOccurred())
	agentREST := agentContents.REST

	// The cluster's own deployment and its Content.
	bds := &fleet.BundleDeploymentList{}
	g.Expect(up.List(ctx, bds, client.InNamespace(ownNS))).To(Succeed())
	g.Expect(bds.Items).NotTo(BeEmpty())
	ownID := manifest.ManifestIDOf(bds.Items[0].Spec.DeploymentID)
	ownContent := &fleet.Content{}
	g.Expect(up.Get(ctx, client.ObjectKey{Name: ownID}, ownContent)).To(Succeed())

	// A neighbour cluster with a deployment of a Content of its own.
	neighbour := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "content-neighbour", Namespace: cluster.Namespace}, Spec: fleet.ClusterSpec{ClientID: "content-neighbour"}}
	g.Expect(up.Create(ctx, neighbour)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(neighbour), neighbour)).To(Succeed())
		g.Expect(neighbour.Status.Namespace).NotTo(BeEmpty())
	}, 60*time.Second, 250*time.Millisecond).Should(Succeed())
	otherNS := neighbour.Status.Namespace
	m := &manifest.Manifest{Resources: []fleet.BundleResource{{Name: "secret.yaml", Content: "kind: Secret\napiVersion: v1\nmetadata:\n  name: neighbour-only\nstringData:\n  password: s3cret\n"}}}
	otherID, err := m.ID()
	g.Expect(err).NotTo(HaveOccurred())
	compressed, err := m.Compressed()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(up.Create(ctx, &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: otherID}, Content: compressed})).To(Succeed())
	g.Expect(up.Create(ctx, &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: "neighbour-app", Namespace: otherNS},
		Spec: fleet.BundleDeploymentSpec{DeploymentID: otherID + ":x"}})).To(Succeed())

	get := func(ns, name string) ([]byte, error) {
		b, _, err := agentContents.Get(ctx, ns, name, "")
		return b, err
	}
	t.Run("allowed: a Content of its own deployment", func(t *testing.T) {
		b, err := get(ownNS, ownID)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		NewWithT(t).Expect(bytes.Equal(b, ownContent.Content)).To(BeTrue(), "served bytes differ from the Content")
	})
	t.Run("refused: another cluster's namespace (403)", func(t *testing.T) {
		_, err := agentREST.Get().AbsPath(contentapi.Path(otherNS, otherID)).Do(ctx).Raw()
		NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})
	t.Run("refused: another cluster's Content from its own namespace (404)", func(t *testing.T) {
		_, err := agentREST.Get().AbsPath(contentapi.Path(ownNS, otherID)).Do(ctx).Raw()
		NewWithT(t).Expect(apierrors.IsNotFound(err)).To(BeTrue(), "got %v", err)
	})
	t.Run("refused: Contents directly, even its own (403)", func(t *testing.T) {
		for _, id := range []string{ownID, otherID} {
			_, err := agentREST.Get().AbsPath("/apis/fleet.cattle.io/v1alpha1/contents/" + id).Do(ctx).Raw()
			NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "get content %s: %v", id, err)
		}
	})
	t.Run("no cluster-wide binding for the agent", func(t *testing.T) {
		crbs := &rbacv1.ClusterRoleBindingList{}
		NewWithT(t).Expect(up.List(ctx, crbs)).To(Succeed())
		for _, b := range crbs.Items {
			for _, s := range b.Subjects {
				if s.Namespace == ownNS {
					t.Errorf("ClusterRoleBinding %s binds %s/%s", b.Name, s.Namespace, s.Name)
				}
			}
		}
	})
	t.Run("refused: the server itself, without the aggregation layer's certificate (401)", func(t *testing.T) {
		addr := contentServerAddr(t, ctx)
		other, err := pki.NewCA("not-front-proxy")
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		crt, key, err := other.Issue(pki.Leaf{CommonName: "front-proxy-client", Client: true})
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		forged, err := tls.X509KeyPair(crt, key)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		for name, certs := range map[string][]tls.Certificate{"no certificate": nil, "certificate of another CA": {forged}} {
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
				InsecureSkipVerify: true, Certificates: certs}}} //nolint:gosec // the test talks to the server directly, on purpose.
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+contentapi.Path(ownNS, ownID), nil)
			req.Header.Set("X-Remote-User", "system:admin")
			req.Header.Set("X-Remote-Group", "system:masters")
			resp, err := hc.Do(req)
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s: status %d, want 401", name, resp.StatusCode)
			}
		}
	})
}

// contentServerAddr is where the APIService routes: the ExternalName
// Service's host and the APIService's port.
func contentServerAddr(t *testing.T, ctx context.Context) string {
	t.Helper()
	api := &unstructured.Unstructured{}
	api.SetAPIVersion("apiregistration.k8s.io/v1")
	api.SetKind("APIService")
	if err := upstream.Client.Get(ctx, client.ObjectKey{Name: contentapi.APIServiceName}, api); err != nil {
		t.Fatal(err)
	}
	port, _, _ := unstructured.NestedInt64(api.Object, "spec", "service", "port")
	name, _, _ := unstructured.NestedString(api.Object, "spec", "service", "name")
	ns, _, _ := unstructured.NestedString(api.Object, "spec", "service", "namespace")
	svc := &corev1.Service{}
	if err := upstream.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ExternalName == "" || port == 0 {
		t.Fatalf("content API Service %s/%s is not an ExternalName Service with a port: %+v", ns, name, svc.Spec)
	}
	return fmt.Sprintf("%s:%d", strings.TrimSuffix(svc.Spec.ExternalName, "."), port)
}
