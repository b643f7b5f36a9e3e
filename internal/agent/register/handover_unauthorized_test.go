package register

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetgo/fleet/internal/contentapi"
)

// fakeManagerAPI is the manager's API server as a registering agent sees it
// through the content API hand-over: discovery offers
// registrationcredentials, ClusterRegistrations are created, the
// credential watch answers 401 (the manager cannot authenticate the
// aggregation layer yet) the first unauthorizedWatches times and then the
// credential, and the core API answers 401 when coreRefuses (the token is
// revoked) or 200.
type fakeManagerAPI struct {
	unauthorizedWatches int
	coreRefuses         bool

	mu            sync.Mutex
	watches       int
	registrations []string
}

func (f *fakeManagerAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	unauthorized := func() {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":401,"reason":"Unauthorized","message":"Unauthorized"}`))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.URL.Path == "/apis/"+contentapi.Group+"/"+contentapi.Version:
		_, _ = w.Write([]byte(`{"kind":"APIResourceList","groupVersion":"content.fleet.cattle.io/v1alpha1","resources":[{"name":"bundlecontents"},{"name":"registrationcredentials"}]}`))
	case r.Method == http.MethodPost && r.URL.Path == "/apis/fleet.cattle.io/v1alpha1/namespaces/ws/clusterregistrations":
		body, _ := io.ReadAll(r.Body)
		var reg struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		_ = json.Unmarshal(body, &reg)
		f.registrations = append(f.registrations, reg.Metadata.Name)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	case r.URL.Path == contentapi.CredentialPath("ws"):
		f.watches++
		if f.watches <= f.unauthorizedWatches {
			unauthorized()
			return
		}
		_, _ = w.Write([]byte(`{"type":"ADDED","object":{"kind":"RegistrationCredential","token":"cluster-token","deploymentNamespace":"cluster-ns","clusterNamespace":"ws","clusterName":"c1"}}` + "\n"))
	case r.URL.Path == "/api" || strings.HasPrefix(r.URL.Path, "/api/"):
		if f.coreRefuses {
			unauthorized()
			return
		}
		_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
	case r.URL.Path == "/apis/fleet.cattle.io/v1alpha1/namespaces/cluster-ns/bundledeployments":
		// The new credential's check (waitUsable).
		_, _ = w.Write([]byte(`{"kind":"BundleDeploymentList","apiVersion":"fleet.cattle.io/v1alpha1","metadata":{},"items":[]}`))
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound"}`))
	}
}

func (f *fakeManagerAPI) filed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.registrations...)
}

func (f *fakeManagerAPI) watchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches
}

// TestHandoverContentAPIUnauthorized: a 401 on the credential watch is the
// manager's own while it cannot authenticate the aggregation layer (the API
// server authenticated the token before proxying). The agent keeps waiting
// for the credential of the registration it filed, instead of taking the
// token for refused and filing a new registration on every retry; a token
// the API server refuses too is still refused at once.
func TestHandoverContentAPIUnauthorized(t *testing.T) {
	// register runs the agent's loop (agent.go): one request across
	// retries, a new one after a refused token.
	register := func(t *testing.T, f *fakeManagerAPI) (*Credential, error) {
		t.Helper()
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		b := &Bootstrap{APIServerURL: srv.URL, Token: "import-token", TokenName: "tok", ClusterNamespace: "ws", SystemRegistrationNamespace: "cattle-fleet-system"}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		random := NewClientRandom()
		var (
			cred *Credential
			err  error
		)
		for range 3 {
			cred, err = Register(ctx, Options{PollInterval: time.Millisecond, Timeout: 30 * time.Second, ClientRandom: random}, b, AgentConfig{ClientID: "c1"})
			if err == nil {
				break
			}
			if errors.Is(err, ErrRefused) {
				random = NewClientRandom()
			}
		}
		return cred, err
	}

	t.Run("the manager alone answers 401", func(t *testing.T) {
		f := &fakeManagerAPI{unauthorizedWatches: 2}
		cred, err := register(t, f)
		if err != nil || cred.Token() != "cluster-token" {
			t.Fatalf("Register: %v, want the credential", err)
		}
		if regs := f.filed(); len(regs) != 1 {
			t.Errorf("%d ClusterRegistrations filed (%v), want 1", len(regs), regs)
		}
	})

	t.Run("the API server refuses the token too", func(t *testing.T) {
		f := &fakeManagerAPI{unauthorizedWatches: 1000, coreRefuses: true}
		srv := httptest.NewServer(f)
		defer srv.Close()
		b := &Bootstrap{APIServerURL: srv.URL, Token: "import-token", TokenName: "tok", ClusterNamespace: "ws", SystemRegistrationNamespace: "cattle-fleet-system"}
		_, err := Register(t.Context(), Options{PollInterval: time.Millisecond, Timeout: 30 * time.Second}, b, AgentConfig{ClientID: "c1"})
		if !errors.Is(err, ErrRefused) {
			t.Errorf("Register: %v, want ErrRefused", err)
		}
		if n := f.watchCount(); n != 1 {
			t.Errorf("%d credential watches, want 1 (refused at once)", n)
		}
	})
}
