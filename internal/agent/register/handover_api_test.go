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

	withResource := `{"kind":"APIResourceList","groupVersion":"content.fleet.cattle.io/v1alpha1","resources":[{"name":"bundlecontents"},{"name":"registrationcredentials"}]}`
	withBoth := `{"kind":"APIResourceList","groupVersion":"content.fleet.cattle.io/v1alpha1","resources":[{"name":"bundlecontents"},{"name":"registrationcredentials"},{"name":"clusterstatuses"}]}`
	withoutResource := `{"kind":"APIResourceList","groupVersion":"content.fleet.cattle.io/v1alpha1","resources":[{"name":"bundlecontents"}]}`
	discovery := func(code int, body string) func(w http.ResponseWriter, r *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))
		}
	}
	for _, tc := range []struct {
		name    string
		code    int
		body    string
		want    offers
		wantErr bool
	}{
		{name: "credentials served", code: 200, body: withResource, want: offers{credential: true}},
		{name: "credentials and check-ins served", code: 200, body: withBoth, want: offers{credential: true, clusterStatus: true}},
		{name: "an older manager", code: 200, body: withoutResource},
		{name: "no content API", code: 404, body: status(404, "NotFound", "the server could not find the requested resource")},
		{name: "the manager does not answer", code: 503, body: status(503, "ServiceUnavailable", "unavailable")},
		{name: "discovery refused", code: 403, body: status(403, "Forbidden", "no")},
		{name: "throttled: ask again", code: 429, body: status(429, "TooManyRequests", "slow down"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer = discovery(tc.code, tc.body)
			got, err := api.served(ctx)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("served = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}

	t.Run("a retry of a request waits for the hand-over it asked for", func(t *testing.T) {
		answer = discovery(200, withResource)
		if v, err := api.chooseHandover(ctx, "random-1"); !v.credential || err != nil {
			t.Fatalf("first attempt: %v, %v; want the content API", v, err)
		}
		answer = discovery(200, withoutResource)
		if v, err := api.chooseHandover(ctx, "random-1"); !v.credential || err != nil {
			t.Errorf("retry of the same request: %v, %v; want the content API still", v, err)
		}
		if v, _ := api.chooseHandover(ctx, "random-2"); v.credential {
			t.Error("a new request did not ask discovery again")
		}
		forgetHandover("random-1")
		forgetHandover("random-2")
		if v, _ := api.chooseHandover(ctx, "random-1"); v.credential {
			t.Error("a forgotten request kept its choice")
		}
		forgetHandover("random-1")
	})
}
