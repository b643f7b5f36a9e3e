package bundledeployment

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/contentapi"
)

// ContentFaults makes the HTTP server the agent of this test binary reads
// Contents and values Secrets through (a reverse proxy in front of the real
// upstream API server, see proxyContents) answer the reads of chosen
// Contents or Secrets with an error status instead of passing them on, as
// an overloaded API server would. Other requests pass.
var ContentFaults = &contentFaults{fail: map[string]int{}, hits: map[string]int{}}

type contentFaults struct {
	mu   sync.Mutex
	fail map[string]int // Content name or secretFault(name) -> HTTP status to answer
	hits map[string]int // same key -> answers given with that status
}

// secretFault is the key of Secret name in contentFaults' maps: no Content
// name has a slash.
func secretFault(name string) string { return "secrets/" + name }

// FailSecret answers the GETs of the Secrets named name (values Secrets
// are named like their BundleDeployment) with HTTP status code from now
// on; 0 passes them again.
func (f *contentFaults) FailSecret(name string, code int) { f.Fail(secretFault(name), code) }

// SecretHits is how many GETs of Secret name were answered with an error.
func (f *contentFaults) SecretHits(name string) int { return f.Hits(secretFault(name)) }

// Fail answers the reads of Content id with HTTP status code from now on;
// 0 passes them again.
func (f *contentFaults) Fail(id string, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if code == 0 {
		delete(f.fail, id)
		return
	}
	f.fail[id] = code
}

// Hits is how many reads of Content id were answered with an error.
func (f *contentFaults) Hits(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[id]
}

// intercept answers a read of a failing Content or Secret and tells
// whether it did. Both ways of reading a Content are caught: the content
// API (bundlecontents in the cluster namespace) and the direct GET.
func (f *contentFaults) intercept(w http.ResponseWriter, req *http.Request) bool {
	id := faultKey(req)
	if id == "" {
		return false
	}
	f.mu.Lock()
	code := f.fail[id]
	if code != 0 {
		f.hits[id]++
	}
	f.mu.Unlock()
	if code == 0 {
		return false
	}
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Code: int32(code),
		Reason:  metav1.StatusReason(strings.ReplaceAll(http.StatusText(code), " ", "")),
		Message: fmt.Sprintf("injected %d for %s", code, id),
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(st)
	return true
}

// faultKey is the key in contentFaults' maps of what req reads, "" when it
// reads neither a Content nor (a GET of) a Secret.
func faultKey(req *http.Request) string {
	p := req.URL.Path
	switch {
	case strings.Contains(p, "/"+contentapi.Resource+"/"), strings.HasPrefix(p, "/apis/fleet.cattle.io/v1alpha1/contents/"):
		return path.Base(p)
	case req.Method == http.MethodGet && strings.HasPrefix(p, "/api/v1/namespaces/") && path.Base(path.Dir(p)) == "secrets":
		return secretFault(path.Base(p))
	}
	return ""
}

// proxyContents points r's Content reads, and its direct GETs (apiReader:
// values Secrets, among others), at a real HTTP server that passes them on
// to r's upstream API server unless ContentFaults says otherwise. It runs
// from onSetup, before the reconciler starts.
func proxyContents(r *Reconciler) {
	up := r.opts.Upstream.GetConfig()
	target, err := url.Parse(up.Host)
	if err != nil || target.Scheme == "" {
		target, err = url.Parse("https://" + up.Host)
	}
	if err != nil {
		panic(err)
	}
	tlsConfig, err := rest.TLSConfigFor(up)
	if err != nil {
		panic(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{TLSClientConfig: tlsConfig}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !ContentFaults.intercept(w, req) {
			proxy.ServeHTTP(w, req)
		}
	}))
	cfg := rest.CopyConfig(up)
	cfg.Host = srv.URL
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	contents, err := contentapi.NewReader(cfg, nil)
	if err != nil {
		panic(err)
	}
	r.contents = contents
	reader, err := client.New(cfg, client.Options{Scheme: r.opts.Upstream.GetScheme(), Mapper: r.opts.Upstream.GetRESTMapper()})
	if err != nil {
		panic(err)
	}
	r.apiReader = reader
}
