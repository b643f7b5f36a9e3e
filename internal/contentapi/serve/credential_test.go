package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/pki"
)

func TestParseCredentialPath(t *testing.T) {
	base := "/apis/" + contentapi.Group + "/" + contentapi.Version
	for _, tc := range []struct {
		path     string
		ns, name string
		ok       bool
	}{
		{path: base + "/namespaces/ws/registrationcredentials", ns: "ws", ok: true},
		{path: base + "/namespaces/ws/registrationcredentials/request-1", ns: "ws", name: "request-1", ok: true},
		{path: base + "/namespaces/ws/registrationcredentials/request-1/status", ok: false},
		{path: base + "/namespaces//registrationcredentials", ok: false},
		{path: base + "/namespaces/ws/bundlecontents", ok: false},
		{path: base + "/registrationcredentials", ok: false},
	} {
		ns, name, ok := parseCredentialPath(tc.path)
		if ok != tc.ok || ns != tc.ns || name != tc.name {
			t.Errorf("parseCredentialPath(%q) = %q, %q, %v; want %q, %q, %v", tc.path, ns, name, ok, tc.ns, tc.name, tc.ok)
		}
	}
}

// recordingCredentials stands in for the registration controller in this
// test of the HTTP layer alone: it records the request and answers as told.
type recordingCredentials struct {
	got  []contentapi.CredentialRequest
	cred *contentapi.RegistrationCredential
	err  error
}

func (r *recordingCredentials) Credential(ctx context.Context, req contentapi.CredentialRequest) (*contentapi.RegistrationCredential, error) {
	r.got = append(r.got, req)
	return r.cred, r.err
}

// TestServeCredential: the user the aggregation layer names reaches the
// registration controller; a watch is of one registration and ends with
// one event (the credential, or the refusal) or none; a GET answers at
// once; a server without the hand-over looks like one without the
// resource; discovery lists the resource only when it is served.
func TestServeCredential(t *testing.T) {
	frontCA, err := pki.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	proxyCert := issue(t, frontCA, "front-proxy-client", true)
	pool := x509.NewCertPool()
	pool.AddCert(frontCA.Cert)
	const user = "system:serviceaccount:ws:import-tok"
	cred := &contentapi.RegistrationCredential{ObjectMeta: metav1.ObjectMeta{Name: "request-1", Namespace: "ws"}, Token: "tkn", DeploymentNamespace: "cluster-ns"}
	base := contentapi.CredentialPath("ws")
	call := func(h *handler, url string, proxied bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, url, nil)
		if proxied {
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{proxyCert}}
			r.Header.Set("X-Fleet-User", user)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	newHandler := func(c contentapi.Credentials) *handler {
		h := &handler{credentials: c}
		h.proxy.Store(&frontProxy{pool: pool, userHeaders: []string{"X-Fleet-User"}})
		return h
	}
	events := func(t *testing.T, rec *httptest.ResponseRecorder) []map[string]json.RawMessage {
		t.Helper()
		if rec.Code != http.StatusOK {
			t.Fatalf("watch: %d %s", rec.Code, rec.Body.String())
		}
		var out []map[string]json.RawMessage
		dec := json.NewDecoder(rec.Body)
		for dec.More() {
			ev := map[string]json.RawMessage{}
			if err := dec.Decode(&ev); err != nil {
				t.Fatal(err)
			}
			out = append(out, ev)
		}
		return out
	}

	t.Run("watch: the credential", func(t *testing.T) {
		src := &recordingCredentials{cred: cred}
		evs := events(t, call(newHandler(src), base+"?watch=true&fieldSelector=metadata.name%3Drequest-1&timeoutSeconds=5", true))
		if len(evs) != 1 || string(evs[0]["type"]) != `"ADDED"` || !strings.Contains(string(evs[0]["object"]), `"token":"tkn"`) {
			t.Fatalf("events = %v, want one ADDED with the credential", evs)
		}
		want := contentapi.CredentialRequest{User: user, Namespace: "ws", Name: "request-1", Wait: true}
		if len(src.got) != 1 || src.got[0] != want {
			t.Errorf("requests = %+v, want [%+v]", src.got, want)
		}
	})
	t.Run("watch: refused", func(t *testing.T) {
		src := &recordingCredentials{err: apierrors.NewForbidden(contentapi.CredentialGroupResource, "request-1", errFor("registration refused: no"))}
		evs := events(t, call(newHandler(src), base+"?watch=1&fieldSelector=metadata.name%3Drequest-1", true))
		if len(evs) != 1 || string(evs[0]["type"]) != `"ERROR"` {
			t.Fatalf("events = %v, want one ERROR", evs)
		}
		st := &metav1.Status{}
		if err := json.Unmarshal(evs[0]["object"], st); err != nil || st.Code != http.StatusForbidden || !strings.Contains(st.Message, "registration refused: no") {
			t.Errorf("status = %+v (%v), want 403 with the reason", st, err)
		}
	})
	t.Run("watch: ends empty", func(t *testing.T) {
		if evs := events(t, call(newHandler(&recordingCredentials{}), base+"?watch=true&fieldSelector=metadata.name%3Drequest-1", true)); len(evs) != 0 {
			t.Errorf("events = %v, want none", evs)
		}
	})
	t.Run("GET answers at once", func(t *testing.T) {
		src := &recordingCredentials{cred: cred}
		rec := call(newHandler(src), base+"/request-1", true)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"token":"tkn"`) {
			t.Errorf("GET: %d %s", rec.Code, rec.Body.String())
		}
		if len(src.got) != 1 || src.got[0].Wait {
			t.Errorf("requests = %+v, want one without Wait", src.got)
		}
	})
	for _, tc := range []struct {
		name, url string
		proxied   bool
		served    bool
		code      int
	}{
		{name: "a watch names one registration", url: base + "?watch=true", proxied: true, served: true, code: http.StatusBadRequest},
		{name: "no list", url: base, proxied: true, served: true, code: http.StatusMethodNotAllowed},
		{name: "not through the aggregation layer", url: base + "/request-1", served: true, code: http.StatusUnauthorized},
		{name: "not served here: as if absent", url: base + "/request-1", proxied: true, code: http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &recordingCredentials{cred: cred}
			var c contentapi.Credentials
			if tc.served {
				c = src
			}
			rec := call(newHandler(c), tc.url, tc.proxied)
			if rec.Code != tc.code {
				t.Errorf("%d %s, want %d", rec.Code, rec.Body.String(), tc.code)
			}
			if len(src.got) != 0 {
				t.Errorf("the registration controller was asked: %+v", src.got)
			}
			if tc.code == http.StatusNotFound && strings.Contains(rec.Body.String(), `"name"`) {
				t.Errorf("404 names an object (%s): an agent would take the resource for served", rec.Body.String())
			}
		})
	}
	t.Run("discovery", func(t *testing.T) {
		for served, want := range map[bool]bool{true: true, false: false} {
			var c contentapi.Credentials
			if served {
				c = &recordingCredentials{}
			}
			rec := call(newHandler(c), "/apis/"+contentapi.Group+"/"+contentapi.Version, false)
			if got := strings.Contains(rec.Body.String(), `"name":"`+contentapi.CredentialResource+`"`); got != want {
				t.Errorf("served %v: discovery lists %s: %v (%s)", served, contentapi.CredentialResource, got, rec.Body.String())
			}
		}
	})
}

type errFor string

func (e errFor) Error() string { return string(e) }
