package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/pki"
	"github.com/fleetgo/fleet/internal/scheme"
)

func TestParsePath(t *testing.T) {
	base := "/apis/" + contentapi.Group + "/" + contentapi.Version
	for _, tc := range []struct {
		path     string
		ns, name string
		ok       bool
	}{
		{path: base + "/namespaces/cluster-a/bundlecontents/s-123", ns: "cluster-a", name: "s-123", ok: true},
		{path: base + "/namespaces/cluster-a/bundlecontents", ok: false},                  // list: not served
		{path: base + "/namespaces/cluster-a/bundlecontents/s-1/status", ok: false},       // no subresources
		{path: base + "/namespaces//bundlecontents/s-1", ok: false},                       // empty namespace
		{path: base + "/namespaces/cluster-a/contents/s-1", ok: false},                    // other resource
		{path: base + "/bundlecontents/s-1", ok: false},                                   // cluster-scoped
		{path: "/apis/fleet.cattle.io/v1alpha1/namespaces/a/bundlecontents/s", ok: false}, // other group
	} {
		ns, name, ok := parsePath(tc.path)
		if ok != tc.ok || ns != tc.ns || name != tc.name {
			t.Errorf("parsePath(%q) = %q, %q, %v; want %q, %q, %v", tc.path, ns, name, ok, tc.ns, tc.name, tc.ok)
		}
	}
}

func TestReferences(t *testing.T) {
	bd := &fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{fleet.ContentNameLabel: "s-label"}},
		Spec:       fleet.BundleDeploymentSpec{DeploymentID: "s-current:opts", StagedDeploymentID: "s-staged:opts"},
	}
	for name, want := range map[string]bool{"s-current": true, "s-staged": true, "s-label": true, "s-other": false, "opts": false, "": false} {
		if got := references(bd, name); got != want {
			t.Errorf("references(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestAuthenticate: only a client certificate of the request-header CA,
// with an allowed name, is the aggregation layer.
func TestAuthenticate(t *testing.T) {
	frontCA, err := pki.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := pki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(ca *pki.CA, cn string, client bool) []*x509.Certificate {
		return []*x509.Certificate{issue(t, ca, cn, client)}
	}
	pool := x509.NewCertPool()
	pool.AddCert(frontCA.Cert)
	for _, tc := range []struct {
		name    string
		names   []string
		certs   []*x509.Certificate
		noTLS   bool
		wantErr bool
	}{
		{name: "aggregation layer", names: []string{"front-proxy-client"}, certs: leaf(frontCA, "front-proxy-client", true)},
		{name: "any name when none is configured", certs: leaf(frontCA, "someone", true)},
		{name: "name not allowed", names: []string{"front-proxy-client"}, certs: leaf(frontCA, "someone", true), wantErr: true},
		{name: "another CA", names: []string{"front-proxy-client"}, certs: leaf(otherCA, "front-proxy-client", true), wantErr: true},
		{name: "a server certificate of the CA", certs: leaf(frontCA, "front-proxy-client", false), wantErr: true},
		{name: "no certificate", wantErr: true},
		{name: "plain HTTP", noTLS: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &handler{}
			h.proxy.Store(&frontProxy{pool: pool, names: tc.names})
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tc.noTLS {
				r.TLS = nil
			} else {
				r.TLS = &tls.ConnectionState{PeerCertificates: tc.certs}
			}
			if err := h.authenticate(r); (err != nil) != tc.wantErr {
				t.Errorf("authenticate: %v, want error %v", err, tc.wantErr)
			}
		})
	}
	t.Run("a rotated CA no longer accepts a certificate verified before", func(t *testing.T) {
		h := &handler{}
		h.proxy.Store(&frontProxy{pool: pool})
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: leaf(frontCA, "front-proxy-client", true)}
		if err := h.authenticate(r); err != nil {
			t.Fatalf("before rotation: %v", err)
		}
		rotated := x509.NewCertPool()
		rotated.AddCert(otherCA.Cert)
		h.proxy.Store(&frontProxy{pool: rotated})
		if err := h.authenticate(r); err == nil {
			t.Error("a certificate of the old CA was accepted after the rotation")
		}
	})
	t.Run("no request-header CA loaded", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: leaf(frontCA, "front-proxy-client", true)}
		if err := (&handler{}).authenticate(r); err == nil {
			t.Error("authenticated without a request-header CA")
		}
	})
}

// TestDiscovery: what the aggregation layer asks before it marks the
// APIService available, and that a GET without the aggregation layer's
// certificate is 401 before anything is read.
func TestDiscovery(t *testing.T) {
	frontCA, err := pki.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(frontCA.Cert)
	h := &handler{}
	h.proxy.Store(&frontProxy{pool: pool})
	for path, want := range map[string]int{
		"/apis":                     http.StatusOK,
		"/apis/" + contentapi.Group: http.StatusOK,
		"/apis/" + contentapi.Group + "/v1alpha1": http.StatusOK,
		"/healthz": http.StatusOK,
		"/apis/" + contentapi.Group + "/v1alpha1/namespaces/a/bundlecontents/s-1": http.StatusUnauthorized,
		"/apis/" + contentapi.Group + "/v1alpha1/namespaces/a/bundlecontents":     http.StatusNotFound,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s: %d, want %d (%s)", path, rec.Code, want, rec.Body.String())
		}
	}
}

// TestNoFrontProxyYet: until the server has loaded the request-header CA
// it cannot tell the aggregation layer from anyone else. It then says it
// is not ready (503 with Retry-After, and /readyz fails) instead of
// refusing the caller with a 401, which an agent would take for its
// credential refused by the API server; once the CA is loaded the same
// request is served, and a caller without the aggregation layer's
// certificate is refused.
func TestNoFrontProxyYet(t *testing.T) {
	frontCA, err := pki.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	proxyCert := issue(t, frontCA, "front-proxy-client", true)
	h := &handler{cache: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(),
		live: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), credentials: &recordingCredentials{},
		statuses: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()}
	base := "/apis/" + contentapi.Group + "/" + contentapi.Version + "/namespaces/cluster-a/"
	requests := map[string]string{
		base + "bundlecontents/s-1?bundleDeployment=app": http.MethodGet,
		base + "registrationcredentials/request-1":       http.MethodGet,
		base + "clusterstatuses/c1":                      http.MethodPut,
	}
	call := func(method, path string, proxied bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader("{}"))
		if proxied {
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{proxyCert}}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	for path, method := range requests {
		rec := call(method, path, true)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s %s without a request-header CA: %d, Retry-After %q; want 503 with Retry-After (%s)",
				method, path, rec.Code, rec.Header().Get("Retry-After"), rec.Body.String())
		}
	}
	if rec := call(http.MethodGet, "/readyz", false); rec.Code == http.StatusOK {
		t.Errorf("/readyz without a request-header CA: %d, want not ready", rec.Code)
	}
	if rec := call(http.MethodGet, "/healthz", false); rec.Code != http.StatusOK {
		t.Errorf("/healthz: %d, want 200 (the process is alive)", rec.Code)
	}

	pool := x509.NewCertPool()
	pool.AddCert(frontCA.Cert)
	h.proxy.Store(&frontProxy{pool: pool})
	if rec := call(http.MethodGet, "/readyz", false); rec.Code != http.StatusOK {
		t.Errorf("/readyz with the request-header CA: %d, want 200", rec.Code)
	}
	path := base + "bundlecontents/s-1?bundleDeployment=app"
	if rec := call(http.MethodGet, path, true); rec.Code != http.StatusNotFound {
		t.Errorf("GET %s from the aggregation layer: %d, want 404 (no deployment names it)", path, rec.Code)
	}
	if rec := call(http.MethodGet, path, false); rec.Code != http.StatusUnauthorized {
		t.Errorf("GET %s without the aggregation layer's certificate: %d, want 401", path, rec.Code)
	}
}

// TestGetPublished: a deployment the cache has not seen yet is answered
// from what this process just wrote, without a GET of it; and nothing else
// is: another deployment, another namespace, another Content.
func TestGetPublished(t *testing.T) {
	content := &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: "s-new"}, Content: []byte("x")}
	countingLive := &countingReader{Reader: fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(content).Build()}
	published := contentapi.NewPublished()
	h := &handler{cache: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), live: countingLive, published: published}
	key := types.NamespacedName{Namespace: "cluster-a", Name: "app"}
	published.Record(key, []string{"s-new"})

	got, err := h.get(t.Context(), "cluster-a", "s-new", "app")
	if err != nil || string(got.Content) != "x" {
		t.Fatalf("get = %v, %v; want the Content", got, err)
	}
	if countingLive.deploymentGets != 0 {
		t.Errorf("%d GETs of the BundleDeployment, want none", countingLive.deploymentGets)
	}
	for _, tc := range []struct{ ns, content, bd string }{
		{"cluster-b", "s-new", "app"},   // another cluster
		{"cluster-a", "s-new", "other"}, // another deployment
		{"cluster-a", "s-old", "app"},   // a Content the write did not name
		{"cluster-a", "s-new", ""},      // no deployment named
	} {
		if _, err := h.get(t.Context(), tc.ns, tc.content, tc.bd); !apierrors.IsNotFound(err) {
			t.Errorf("get(%s, %s, %s): %v, want NotFound", tc.ns, tc.content, tc.bd, err)
		}
	}
}

// TestGetNamedDeploymentFromCache: when the agent names its deployment and
// the cache's copy of it references the Content, the namespace is not
// listed; when it does not, another deployment of the namespace still
// grants the read, and none grants nothing.
func TestGetNamedDeploymentFromCache(t *testing.T) {
	content := func(name string) *fleet.Content {
		return &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: name}, Content: []byte(name)}
	}
	bd := func(name, contentID string) *fleet.BundleDeployment {
		return &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-a", Name: name},
			Spec: fleet.BundleDeploymentSpec{DeploymentID: contentID + ":options"}}
	}
	cache := &countingReader{Reader: fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithObjects(bd("app", "s-app"), bd("db", "s-db")).Build()}
	live := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(content("s-app"), content("s-db"), content("s-other")).Build()
	h := &handler{cache: cache, live: live}

	for _, tc := range []struct {
		content, bd string
		found       bool
		lists       int
	}{
		{"s-app", "app", true, 0},    // the named deployment's own Content
		{"s-db", "app", true, 1},     // another deployment of the namespace names it
		{"s-db", "", true, 1},        // no deployment named (older agents)
		{"s-other", "app", false, 1}, // nothing in the namespace names it
	} {
		cache.lists = 0
		got, err := h.get(t.Context(), "cluster-a", tc.content, tc.bd)
		switch {
		case tc.found && (err != nil || string(got.Content) != tc.content):
			t.Errorf("get(%s, %s) = %v, %v; want the Content", tc.content, tc.bd, got, err)
		case !tc.found && !apierrors.IsNotFound(err):
			t.Errorf("get(%s, %s): %v, want NotFound", tc.content, tc.bd, err)
		}
		if cache.lists != tc.lists {
			t.Errorf("get(%s, %s) listed the cache %d times, want %d", tc.content, tc.bd, cache.lists, tc.lists)
		}
	}
}

// countingReader counts GETs of BundleDeployments and lists.
type countingReader struct {
	client.Reader
	deploymentGets int
	lists          int
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists++
	return r.Reader.List(ctx, list, opts...)
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*fleet.BundleDeployment); ok {
		r.deploymentGets++
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// issue returns a certificate of ca for cn (a client certificate when
// client is set).
func issue(t *testing.T, ca *pki.CA, cn string, client bool) *x509.Certificate {
	t.Helper()
	crt, _, err := ca.Issue(pki.Leaf{CommonName: cn, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(crt)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
