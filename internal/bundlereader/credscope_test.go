package bundlereader

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// authSeen is a server in front of a chart source that records whether any
// request carried an Authorization header.
type authSeen struct {
	URL  string // the server's URL
	Host string // its host:port
	auth atomic.Int32
	reqs atomic.Int32
}

// record starts a server that records requests and passes them to h. A
// challenging one answers requests without credentials with a Basic auth
// challenge, as a registry phishing for them would: an OCI client sends
// credentials only when challenged.
func record(t *testing.T, h http.Handler, challenging bool) *authSeen {
	t.Helper()
	s := &authSeen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.reqs.Add(1)
		if req.Header.Get("Authorization") != "" {
			s.auth.Add(1)
		} else if challenging {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	s.URL, s.Host = srv.URL, strings.TrimPrefix(srv.URL, "http://")
	return s
}

// recordedRepo is a chart repository (helmrepo) behind record.
func recordedRepo(t *testing.T, charts ...[]byte) *authSeen {
	t.Helper()
	backend := helmrepo.New(t, helmrepo.Options{})
	for _, c := range charts {
		backend.Publish(t, c)
	}
	u, err := url.Parse(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	return record(t, httputil.NewSingleHostReverseProxy(u), false)
}

// recordedRegistry is an OCI registry behind record, holding charts under
// <host>/charts/<name>.
func recordedRegistry(t *testing.T, challenging bool, charts ...[]byte) *authSeen {
	t.Helper()
	host := ociRegistry(t, "", "", charts...)
	u, err := url.Parse("http://" + host)
	if err != nil {
		t.Fatal(err)
	}
	return record(t, httputil.NewSingleHostReverseProxy(u), challenging)
}

// TestCredentialsStayWithTheirRepository: the Helm credentials given for a
// private repository (helmSecretName, fleet apply --username) are sent to
// that repository only, never to the repositories its chart's dependencies
// name nor to another host its index points a download at, over HTTP or
// OCI; helmRepoURLRegex is the explicit way to give a dependency's
// repository the credentials.
func TestCredentialsStayWithTheirRepository(t *testing.T) {
	httpDeps := recordedRepo(t, helmrepo.Chart(t, "httpdep", "1.0.0"))
	ociDeps := recordedRegistry(t, false, helmrepo.Chart(t, "ocidep", "1.0.0"))
	phishing := recordedRegistry(t, true, helmrepo.Chart(t, "phished", "1.0.0"))
	private := helmrepo.New(t, helmrepo.Options{Username: "alice", Password: "s3cret"})
	private.Publish(t, helmrepo.Chart(t, "app", "1.0.0",
		&chartv2.Dependency{Name: "httpdep", Version: "1.0.0", Repository: httpDeps.URL},
		&chartv2.Dependency{Name: "ocidep", Version: "1.0.0", Repository: "oci://" + ociDeps.Host + "/charts"},
	))
	private.Publish(t, helmrepo.Chart(t, "phishy", "1.0.0",
		&chartv2.Dependency{Name: "phished", Version: "1.0.0", Repository: "oci://" + phishing.Host + "/charts"},
	))
	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + private.URL + "\n  chart: app\n"})
	auth := HelmAuth{Username: "alice", Password: "s3cret", BasicHTTP: true}

	b, err := readOne(t, dir, Options{Auth: auth})
	if err != nil {
		t.Fatal(err) // the private repository got its credentials
	}
	res := resourceNames(b)
	for _, dep := range []string{"httpdep", "ocidep"} {
		if _, ok := res[b.Spec.Helm.Chart+"/charts/"+dep+"/Chart.yaml"]; !ok {
			t.Errorf("dependency %s missing: %v", dep, res)
		}
	}
	if httpDeps.reqs.Load() == 0 || ociDeps.reqs.Load() == 0 {
		t.Fatalf("dependency servers not reached: http %d, oci %d requests", httpDeps.reqs.Load(), ociDeps.reqs.Load())
	}
	if n := httpDeps.auth.Load(); n != 0 {
		t.Errorf("the HTTP dependency repository received the private repository's credentials (%d requests)", n)
	}
	if n := ociDeps.auth.Load(); n != 0 {
		t.Errorf("the OCI dependency registry received the private repository's credentials (%d requests)", n)
	}

	t.Run("OCI dependency registry asking for credentials", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + private.URL + "\n  chart: phishy\n"})
		if _, err := readOne(t, dir, Options{Auth: auth}); err == nil {
			t.Error("a dependency pulled from a registry that requires credentials it was not given")
		}
		if phishing.reqs.Load() == 0 {
			t.Fatal("dependency registry not reached")
		}
		if n := phishing.auth.Load(); n != 0 {
			t.Errorf("the OCI dependency registry received the private repository's credentials (%d requests)", n)
		}
	})

	t.Run("regex names the dependency repository", func(t *testing.T) {
		before := httpDeps.auth.Load()
		if _, err := readOne(t, dir, Options{Auth: auth, HelmRepoURLRegex: "^http://127\\.0\\.0\\.1"}); err != nil {
			t.Fatal(err)
		}
		if httpDeps.auth.Load() == before {
			t.Error("a dependency repository the regex names did not receive the credentials")
		}
	})

	t.Run("index pointing at another host", func(t *testing.T) {
		elsewhere := recordedRegistry(t, true, helmrepo.Chart(t, "moved", "1.0.0"))
		httpElsewhere := recordedRepo(t, helmrepo.Chart(t, "moved2", "1.0.0"))
		index := "apiVersion: v1\nentries:\n" +
			"  moved:\n  - name: moved\n    version: 1.0.0\n    urls: [oci://" + elsewhere.Host + "/charts/moved]\n" +
			"  moved2:\n  - name: moved2\n    version: 1.0.0\n    urls: [" + httpElsewhere.URL + "/moved2-1.0.0.tgz]\n"
		idx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if u, p, ok := req.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			_, _ = w.Write([]byte(index))
		}))
		defer idx.Close()
		// The registry asks for credentials, which it must not get.
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + idx.URL + "\n  chart: moved\n"})
		if _, err := readOne(t, dir, Options{Auth: auth}); err == nil {
			t.Error("a chart pulled from a registry that requires credentials it was not given")
		}
		dir = writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + idx.URL + "\n  chart: moved2\n"})
		b, err := readOne(t, dir, Options{Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		mustHaveChart(t, b, b.Spec.Helm, "moved2", "1.0.0")
		if elsewhere.reqs.Load() == 0 {
			t.Fatal("the registry the index points at was not reached")
		}
		if n := elsewhere.auth.Load(); n != 0 {
			t.Errorf("an OCI registry the index points at received the credentials (%d requests)", n)
		}
		if n := httpElsewhere.auth.Load(); n != 0 {
			t.Errorf("an HTTP host the index points at received the credentials (%d requests)", n)
		}
	})
}
