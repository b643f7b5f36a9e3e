package serve

import (
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/names"
)

// TestCheckClusterStatus: a check-in is taken only from a ServiceAccount of
// the cluster namespace, for the Cluster whose namespace that is, with a
// body that agrees with its path.
func TestCheckClusterStatus(t *testing.T) {
	ns := names.ClusterNamespace("ws", "c1")
	own := "system:serviceaccount:" + ns + ":request-1"
	status := func(name, namespace, workspace string) *contentapi.ClusterStatus {
		return &contentapi.ClusterStatus{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Workspace: workspace}
	}
	for _, tc := range []struct {
		name      string
		user      string
		path      string // the Cluster the path names
		body      *contentapi.ClusterStatus
		forbidden bool
		bad       bool
	}{
		{name: "its own Cluster", user: own, path: "c1", body: status("c1", ns, "ws")},
		{name: "names left out of the body", user: own, path: "c1", body: status("", "", "ws")},
		{name: "another Cluster from its namespace", user: own, path: "c2", body: status("c2", ns, "ws"), forbidden: true},
		{name: "its Cluster in another workspace", user: own, path: "c1", body: status("c1", ns, "other"), forbidden: true},
		{name: "a ServiceAccount of another namespace", user: "system:serviceaccount:" + names.ClusterNamespace("ws", "c2") + ":request-2", path: "c1", body: status("c1", ns, "ws"), forbidden: true},
		{name: "a user, not a ServiceAccount", user: "admin", path: "c1", body: status("c1", ns, "ws"), forbidden: true},
		{name: "a prefix of the namespace is not the namespace", user: "system:serviceaccount:" + ns + "x:sa", path: "c1", body: status("c1", ns, "ws"), forbidden: true},
		{name: "body names another cluster", user: own, path: "c1", body: status("c2", ns, "ws"), bad: true},
		{name: "body names another namespace", user: own, path: "c1", body: status("c1", "elsewhere", "ws"), bad: true},
		{name: "no workspace", user: own, path: "c1", body: status("c1", ns, ""), bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkClusterStatus(tc.user, ns, tc.path, tc.body)
			switch {
			case tc.forbidden && !apierrors.IsForbidden(err):
				t.Errorf("got %v, want Forbidden", err)
			case tc.bad && !apierrors.IsBadRequest(err):
				t.Errorf("got %v, want BadRequest", err)
			case !tc.forbidden && !tc.bad && err != nil:
				t.Errorf("got %v, want it taken", err)
			}
		})
	}
}

// A replica that does not take check-ins answers as if the resource did
// not exist (the agent then patches its Cluster), and lists it not in
// discovery; one that does refuses anything but a PUT.
func TestServeClusterStatusNotServed(t *testing.T) {
	path := contentapi.ClusterStatusPath("cluster-ns", "c1")
	h := &handler{}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, path, strings.NewReader("{}")))
	if rec.Code != http.StatusNotFound {
		t.Errorf("not served: %d %s, want 404", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/apis/"+contentapi.Group+"/"+contentapi.Version, nil))
	if strings.Contains(rec.Body.String(), contentapi.ClusterStatusResource) {
		t.Errorf("discovery lists %s though it is not served: %s", contentapi.ClusterStatusResource, rec.Body)
	}

	h = &handler{statuses: fake.NewClientBuilder().Build()}
	h.proxy.Store(&frontProxy{pool: x509.NewCertPool()})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/apis/"+contentapi.Group+"/"+contentapi.Version, nil))
	if !strings.Contains(rec.Body.String(), `"name":"`+contentapi.ClusterStatusResource+`"`) {
		t.Errorf("discovery does not list %s: %s", contentapi.ClusterStatusResource, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET of a check-in: %d %s, want 405", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, path, strings.NewReader("{}")))
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("PUT without the aggregation layer's certificate: %d %s, want 401", rec.Code, rec.Body)
	}
}
