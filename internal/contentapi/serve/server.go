// Package serve is the manager's side of the content API (see package
// contentapi): an HTTPS server behind the API server's aggregation layer,
// its serving certificate, and the Service and APIService that route to it.
package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/manifest"
)

// frontProxy is who may call the server: clients with a certificate from
// the API server's request-header CA (and, when the API server names them,
// one of the allowed common names). Only the aggregation layer has one.
type frontProxy struct {
	pool  *x509.CertPool
	names []string
	// userHeaders carry the authenticated user of a proxied request
	// (kube-apiserver --requestheader-username-headers).
	userHeaders []string
}

// handler answers discovery and GETs of BundleContents.
type handler struct {
	// cache is the manager's cache (BundleDeployments); live reads the
	// API server directly, for a deployment the cache has not seen yet
	// and for Contents (which the manager caches metadata-only).
	cache client.Reader
	live  client.Reader
	// published answers for deployments this process just wrote, before
	// the cache shows them (may be nil).
	published *contentapi.Published
	proxy     atomic.Pointer[frontProxy]
	// verified remembers the client certificates that verified against
	// the current frontProxy (key: the DER bytes), so that the chain is
	// checked once, not on every request. Only the aggregation layer's
	// certificates get in, so it stays tiny.
	verified sync.Map
	// contents memoizes Contents by name: a Content's name is the hash of
	// its bytes, so an entry never goes stale, and a rollout to thousands
	// of clusters reads each new Content from etcd once.
	contents contentCache
	// credentials hands registering agents their credential (nil: this
	// replica does not serve registrationcredentials).
	credentials contentapi.Credentials
	// statuses writes the check-ins agents report (nil: this replica does
	// not serve clusterstatuses).
	statuses client.StatusClient
	// firstCheckIn, when set, adds to a cluster's first check-in the
	// status the Cluster controller would write after it (see
	// Options.FirstCheckIn).
	firstCheckIn func(context.Context, *fleet.Cluster) error
	// elected, when set, holds firstCheckIn back until it is closed
	// (Options.Elected).
	elected <-chan struct{}
	// liveFlight, misses and lists bound what a cache miss costs the API
	// server (see liveCheck and listCheck).
	liveFlight singleflight.Group
	misses     missCache
	lists      listCache
	// liveSlots caps the reads of live in flight at once for liveFlight,
	// contentSlots those for contents: a pool each, so that misses of
	// deployments cannot starve the Content read a rollout's agents all
	// wait on (see maxLiveReads). Their zero values have maxLiveReads
	// slots.
	liveSlots    readSlots
	contentSlots readSlots
	// now is the clock of misses and lists (nil: time.Now; tests set it).
	now func() time.Time
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch path {
	case "/healthz", "/livez":
		_, _ = w.Write([]byte("ok"))
		return
	case "/readyz":
		// Ready once the server can authenticate the aggregation layer.
		if h.proxy.Load() == nil {
			writeStatus(w, errNoFrontProxy)
			return
		}
		_, _ = w.Write([]byte("ok"))
		return
	case "/apis":
		writeJSON(w, http.StatusOK, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{apiGroup()}})
		return
	case "/apis/" + contentapi.Group:
		g := apiGroup()
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		writeJSON(w, http.StatusOK, &g)
		return
	case "/apis/" + contentapi.Group + "/" + contentapi.Version:
		resources := []metav1.APIResource{{Name: contentapi.Resource, Namespaced: true, Kind: contentapi.Kind, Verbs: metav1.Verbs{"get"}}}
		if h.credentials != nil {
			resources = append(resources, metav1.APIResource{Name: contentapi.CredentialResource, Namespaced: true,
				Kind: contentapi.CredentialKind, Verbs: metav1.Verbs{"get", "watch"}})
		}
		if h.statuses != nil {
			resources = append(resources, metav1.APIResource{Name: contentapi.ClusterStatusResource, Namespaced: true,
				Kind: contentapi.ClusterStatusKind, Verbs: metav1.Verbs{"update"}})
		}
		writeJSON(w, http.StatusOK, &metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: contentapi.Group + "/" + contentapi.Version,
			APIResources: resources,
		})
		return
	}
	if ns, name, ok := parseCredentialPath(path); ok {
		h.serveCredential(w, r, ns, name)
		return
	}
	if ns, name, ok := parseObjectPath(path, contentapi.ClusterStatusResource); ok {
		h.serveClusterStatus(w, r, ns, name)
		return
	}
	ns, name, ok := parsePath(path)
	if !ok {
		writeStatus(w, apierrors.NewNotFound(contentapi.GroupResource, ""))
		return
	}
	if !h.admit(w, r, contentapi.GroupResource, http.MethodGet) {
		return
	}
	bc, err := h.get(r.Context(), ns, name, r.URL.Query().Get(contentapi.DeploymentParam))
	if err != nil {
		writeStatus(w, err)
		return
	}
	writeJSON(w, http.StatusOK, bc)
}

// admit lets through a request with method from the aggregation layer; it
// answers anything else (405, 401) itself and returns false. Until the
// request-header CA is loaded it cannot tell the aggregation layer from
// anyone else, and answers 503 with Retry-After: a 401 would tell an agent
// that the API server refused its credential.
func (h *handler) admit(w http.ResponseWriter, r *http.Request, gr schema.GroupResource, method string) bool {
	if r.Method != method {
		writeStatus(w, apierrors.NewMethodNotSupported(gr, strings.ToLower(r.Method)))
		return false
	}
	if err := h.authenticate(r); err != nil {
		if errors.Is(err, errNoFrontProxy) {
			writeStatus(w, err)
		} else {
			writeStatus(w, apierrors.NewUnauthorized(err.Error()))
		}
		return false
	}
	return true
}

// notReadyRetrySeconds is the Retry-After of errNoFrontProxy.
const notReadyRetrySeconds = 10

// errNoFrontProxy is the answer while the request-header CA is not loaded
// (the server has just started and could not read it yet).
var errNoFrontProxy = func() *apierrors.StatusError {
	err := apierrors.NewServiceUnavailable("the content API has not loaded the API server's request-header CA yet")
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: notReadyRetrySeconds}
	return err
}()

func apiGroup() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: contentapi.Group + "/" + contentapi.Version, Version: contentapi.Version}
	return metav1.APIGroup{Name: contentapi.Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

// parsePath splits /apis/<group>/<version>/namespaces/<ns>/bundlecontents/<name>.
func parsePath(p string) (ns, name string, ok bool) { return parseObjectPath(p, contentapi.Resource) }

// parseObjectPath splits /apis/<group>/<version>/namespaces/<ns>/<resource>/<name>.
func parseObjectPath(p, resource string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(p, "/apis/"+contentapi.Group+"/"+contentapi.Version+"/namespaces/")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[1] != resource || parts[0] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[0], parts[2], true
}

// authenticate accepts only the aggregation layer: a client certificate
// that chains to the request-header CA. The API server has already
// authenticated the user and authorized `get bundlecontents` in the
// namespace before it proxies, so the server need not (and does not) look
// at the user headers.
func (h *handler) authenticate(r *http.Request) error {
	fp := h.proxy.Load()
	if fp == nil {
		return errNoFrontProxy
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return errors.New("the content API answers only the API server's aggregation layer")
	}
	certs := r.TLS.PeerCertificates
	if v, ok := h.verified.Load(string(certs[0].Raw)); ok && v.(*frontProxy) == fp {
		return nil
	}
	opts := x509.VerifyOptions{Roots: fp.pool, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := certs[0].Verify(opts); err != nil {
		return errors.New("client certificate is not from the request-header CA")
	}
	if len(fp.names) > 0 && !slices.Contains(fp.names, certs[0].Subject.CommonName) {
		return errors.New("client certificate is not one of the allowed request-header names")
	}
	h.verified.Store(string(certs[0].Raw), fp)
	return nil
}

// get returns Content name if a BundleDeployment in ns references it; the
// same NotFound otherwise, so that a cluster learns nothing about Contents
// it does not deploy. bdName, when the agent names the deployment it reads
// for, lets the check read that one deployment from the cache, not list
// the namespace (which copies each of its deployments: with B bundles per
// cluster, a rollout of all of them copied B² objects per cluster), and
// lets a cache miss cost one small GET instead of a list from the API
// server.
func (h *handler) get(ctx context.Context, ns, name, bdName string) (*contentapi.BundleContent, error) {
	notFound := apierrors.NewNotFound(contentapi.GroupResource, name)
	key := types.NamespacedName{Namespace: ns, Name: bdName}
	var (
		ok  bool
		err error
	)
	if bdName != "" {
		ok, err = deploymentReferences(ctx, h.cache, key, name)
	}
	if err == nil && !ok {
		// Another deployment of the namespace may name it (the named one
		// may be older in the cache than in the agent's watch).
		ok, err = referenced(ctx, h.cache, ns, name)
	}
	if err == nil && !ok {
		// The agent may have seen a new deployment before the cache did
		// (the manager's watch carries every deployment and may lag).
		if bdName != "" && h.published.References(key, name) {
			ok = true
		} else {
			ok, err = h.liveCheck(ctx, ns, bdName, name)
		}
	}
	if err != nil {
		return nil, busyOr("reading BundleDeployments", err)
	}
	if !ok {
		return nil, notFound
	}
	c, err := h.contents.get(ctx, h.contentReads(), name)
	if apierrors.IsNotFound(err) {
		return nil, notFound
	}
	if err != nil {
		return nil, busyOr("reading Content", err)
	}
	return &contentapi.BundleContent{
		TypeMeta:   metav1.TypeMeta{Kind: contentapi.Kind, APIVersion: contentapi.Group + "/" + contentapi.Version},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Content:    c.Content,
		SHA256Sum:  c.SHA256Sum,
	}, nil
}

// deploymentReferences reports whether deployment key, as r reads it, names
// Content name; a deployment r does not have names nothing.
func deploymentReferences(ctx context.Context, r client.Reader, key types.NamespacedName, name string, opts ...client.GetOption) (bool, error) {
	bd := &fleet.BundleDeployment{}
	if err := r.Get(ctx, key, bd, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return references(bd, name), nil
}

// referenced reports whether a BundleDeployment in ns names Content name
// (as its deployment, its staged deployment or its content label).
func referenced(ctx context.Context, r client.Reader, ns, name string) (bool, error) {
	bds := &fleet.BundleDeploymentList{}
	if err := r.List(ctx, bds, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	for i := range bds.Items {
		if references(&bds.Items[i], name) {
			return true, nil
		}
	}
	return false, nil
}

// references reports whether bd names Content name.
func references(bd *fleet.BundleDeployment, name string) bool {
	names := contentsOf(bd)
	return name != "" && slices.Contains(names[:], name)
}

// contentsOf are the Contents bd names: its deployment's, its staged
// deployment's and its content label's (each may be empty).
func contentsOf(bd *fleet.BundleDeployment) [3]string {
	return [3]string{manifest.ManifestIDOf(bd.Spec.DeploymentID), manifest.ManifestIDOf(bd.Spec.StagedDeploymentID),
		bd.Labels[fleet.ContentNameLabel]}
}

// contentCache keeps recently served Contents, up to maxCachedBytes. A
// rollout makes every targeted agent ask for the same new Content at once:
// one read from the API server answers all of them (flight).
type contentCache struct {
	flight singleflight.Group
	mu     sync.Mutex
	items  map[string]*fleet.Content
	order  []string
	bytes  int
	// joining, when set (tests), is called by every caller just before it
	// starts or joins the shared read.
	joining func()
}

// maxCachedBytes bounds the memory of the cache (compressed manifests).
const maxCachedBytes = 32 << 20

func (c *contentCache) get(ctx context.Context, r client.Reader, name string) (*fleet.Content, error) {
	c.mu.Lock()
	if x, ok := c.items[name]; ok {
		c.mu.Unlock()
		return x, nil
	}
	c.mu.Unlock()
	if c.joining != nil {
		c.joining()
	}
	v, err := shared(ctx, &c.flight, name, func() (any, error) {
		// Shared by every waiter: not ended by the first one's request. In
		// a rollout thousands of agents wait on this one read; if the first
		// requester went away, they would all be answered a 500 that
		// RetryFreshContent does not retry.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), liveReadTimeout)
		defer cancel()
		x := &fleet.Content{}
		if err := r.Get(ctx, types.NamespacedName{Name: name}, x); err != nil {
			return nil, err
		}
		x = &fleet.Content{Content: x.Content, SHA256Sum: x.SHA256Sum}
		// Here, not in the waiters: the read fills the cache even when
		// every request that waited for it has gone.
		c.add(name, x)
		return x, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*fleet.Content), nil
}

// add keeps x as Content name, unless it alone is over maxCachedBytes,
// dropping the oldest entries beyond that bound.
func (c *contentCache) add(name string, x *fleet.Content) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.items == nil {
		c.items = map[string]*fleet.Content{}
	}
	if _, ok := c.items[name]; ok || len(x.Content) > maxCachedBytes {
		return
	}
	c.items[name] = x
	c.order = append(c.order, name)
	c.bytes += len(x.Content)
	for c.bytes > maxCachedBytes && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.items[old].Content)
		delete(c.items, old)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeStatus(w http.ResponseWriter, err error) {
	st := statusOf(err)
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	writeJSON(w, int(st.Code), &st)
}

// statusOf is the Status an API server answers for err (an internal error
// unless err is an API error).
func statusOf(err error) metav1.Status {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		se = apierrors.NewInternalError(err)
	}
	st := se.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	return st
}

// tlsConfig serves cert and asks for (but does not require: discovery
// needs none) a client certificate.
func tlsConfig(cert *tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*cert},
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}
