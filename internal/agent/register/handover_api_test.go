package register

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/fleetgo/fleet/internal/contentapi"
)

// TestCredentialWatch: how the agent reads the manager's answers on its
// credential watch (the manager's side, through a real aggregation layer,
// is tested in test/e2e): the credential; the manager's refusal, which
// stops the registration with the manager's reason; an RBAC refusal of the
// request itself, which is only a reason to try again; an empty watch; and
// discovery with and without the resource.
func TestCredentialWatch(t *testing.T) {
	var answer func(w http.ResponseWriter, r *http.Request)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answer(w, r) }))
	defer srv.Close()
	api, err := newCredentialAPI(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	stream := func(lines ...string) func(w http.ResponseWriter, r *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != contentapi.CredentialPath("ws") || r.URL.Query().Get("watch") != "true" ||
				r.URL.Query().Get("fieldSelector") != "metadata.name=request-1" {
				t.Errorf("unexpected request %s", r.URL)
			}
			w.Header().Set("Content-Type", "application/json")
			for _, l := range lines {
				_, _ = w.Write([]byte(l + "\n"))
			}
		}
	}
	status := func(code int, reason, msg string) string {
		return `{"kind":"Status","apiVersion":"v1","status":"Failure","code":` + strconv.Itoa(code) + `,"reason":"` + reason + `","message":"` + msg + `"}`
	}
	ctx := t.Context()

	answer = stream(`{"type":"ADDED","object":{"kind":"RegistrationCredential","token":"tkn","deploymentNamespace":"cluster-ns","clusterNamespace":"ws","clusterName":"c1"}}`)
	cred, err := api.watchOnce(ctx, "ws", "request-1", time.Second)
	if err != nil || cred == nil || cred.Token != "tkn" || cred.DeploymentNamespace != "cluster-ns" || cred.ClusterName != "c1" {
		t.Errorf("credential: %+v, %v", cred, err)
	}

	answer = stream(`{"type":"ERROR","object":` + status(403, "Forbidden", "registration refused: clientID is already used") + `}`)
	_, err = api.watchOnce(ctx, "ws", "request-1", time.Second)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "clientID is already used") {
		t.Errorf("manager's refusal: %v, want ErrRefused with the reason", err)
	}
	if _, err := api.await(ctx, "ws", "request-1", time.Millisecond, time.Now().Add(time.Minute)); !errors.Is(err, ErrRefused) {
		t.Errorf("await after the manager's refusal: %v, want ErrRefused at once", err)
	}

	answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(status(403, "Forbidden", "RBAC: not allowed")))
	}
	_, err = api.watchOnce(ctx, "ws", "request-1", time.Second)
	if !apierrors.IsForbidden(err) || errors.Is(err, ErrRefused) {
		t.Errorf("RBAC refusal of the request: %v, want a 403 that is not ErrRefused", err)
	}

	answer = stream()
	if cred, err := api.watchOnce(ctx, "ws", "request-1", time.Second); cred != nil || err != nil {
		t.Errorf("empty watch: %+v, %v; want nothing", cred, err)
	}
	if _, err := api.await(ctx, "ws", "request-1", time.Millisecond, time.Now().Add(-time.Second)); !errors.Is(err, errNotGranted) {
		t.Errorf("await past its deadline: %v, want errNotGranted", err)
	}

	for _, tc := range []struct {
		body string
		code int
		want bool
	}{
		{body: `{"kind":"APIResourceList","groupVersion":"content.fleet.cattle.io/v1alpha1","resources":[{"name":"bundlecontents"},{"name":"registrationcredentials"}]}`, code: 200, want: true},
		{body: `{"kind":"APIResourceList","groupVersion":"content.fleet.cattle.io/v1alpha1","resources":[{"name":"bundlecontents"}]}`, code: 200},
		{body: status(404, "NotFound", "the server could not find the requested resource"), code: 404},
		{body: status(503, "ServiceUnavailable", "unavailable"), code: 503},
	} {
		answer = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tc.code)
			_, _ = w.Write([]byte(tc.body))
		}
		if got := api.served(ctx); got != tc.want {
			t.Errorf("served with %d %s = %v, want %v", tc.code, tc.body, got, tc.want)
		}
	}
}
