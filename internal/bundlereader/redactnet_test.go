package bundlereader

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

const netToken = "ghp_SECRETTOKEN"

// closedAddr is host:port of a port nothing listens on: connections are
// refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// hangUpRepo serves index.yaml with a chart x whose archive request is
// answered by closing the connection: the index works, the download fails
// at the network level.
func hangUpRepo(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/index.yaml" {
			_, _ = w.Write([]byte("apiVersion: v1\nentries:\n  x:\n  - name: x\n    version: 1.0.0\n    urls: [x-1.0.0.tgz]\n"))
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestNetworkErrorsRedactUserToken: a token given as the user name of a
// repository or chart URL is not quoted by errors of the network (refused
// connection, connection closed), which the HTTP client reports with the
// request's URL: index, chart archive, chart URL and dependency alike.
func TestNetworkErrorsRedactUserToken(t *testing.T) {
	closed := closedAddr(t)
	hangUp := hangUpRepo(t)
	for _, tc := range []struct {
		name string
		host string
		yaml string // fleet.yaml for the URL with the token
		dep  bool   // the URL is a dependency's repository
	}{
		{name: "index refused", host: closed, yaml: "helm:\n  repo: http://" + netToken + "@" + closed + "\n  chart: x\n"},
		{name: "chart URL refused", host: closed, yaml: "helm:\n  chart: http://" + netToken + "@" + closed + "/x.tgz\n"},
		{name: "archive hang-up", host: hangUp, yaml: "helm:\n  repo: http://" + netToken + "@" + hangUp + "\n  chart: x\n"},
		{name: "archive hang-up, password", host: hangUp, yaml: "helm:\n  repo: http://" + netToken + ":pw@" + hangUp + "\n  chart: x\n"},
		{name: "dependency refused", host: closed, dep: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"fleet.yaml": tc.yaml}
			if tc.dep {
				files = map[string]string{
					"fleet.yaml":       "helm:\n  chart: chart\n",
					"chart/Chart.yaml": "apiVersion: v2\nname: local\nversion: 0.1.0\ndependencies:\n- name: dep\n  version: 1.0.0\n  repository: http://" + netToken + "@" + tc.host + "\n",
				}
			}
			_, err := readOne(t, writeRepo(t, files), Options{})
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), netToken) {
				t.Fatalf("error quotes the token: %v", err)
			}
			if !strings.Contains(err.Error(), tc.host) {
				t.Fatalf("error does not name %s: %v", tc.host, err)
			}
		})
	}
	t.Run("HelmOp", func(t *testing.T) {
		_, err := ReadHelmOp(context.Background(), "op", &fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
			Helm: &fleet.HelmOptions{Repo: "http://" + netToken + "@" + closed, Chart: "x"},
		}}, Options{})
		if err == nil || strings.Contains(err.Error(), netToken) {
			t.Fatalf("err = %v, want an error without the token", err)
		}
	})
}

// TestURLUserInfoIsSentAsBasicAuth: user information written into a
// repository URL still authenticates the index and archive downloads,
// now as a basic auth header rather than through the URL.
func TestURLUserInfoIsSentAsBasicAuth(t *testing.T) {
	chart := paddedChart(t, "x", 10)
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, pass, _ := req.BasicAuth()
		seen = append(seen, req.URL.Path+" "+user+":"+pass)
		if user != "deploy" || pass != "s3c/r3t" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch req.URL.Path {
		case "/index.yaml":
			_, _ = w.Write([]byte("apiVersion: v1\nentries:\n  x:\n  - name: x\n    version: 1.0.0\n    urls: [x-1.0.0.tgz]\n"))
		case "/x-1.0.0.tgz":
			_, _ = w.Write(chart)
		default:
			http.NotFound(w, req)
		}
	}))
	defer srv.Close()
	repoURL := strings.Replace(srv.URL, "http://", "http://deploy:s3c%2Fr3t@", 1)
	b, err := readOne(t, writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + repoURL + "\n  chart: x\n"}), Options{})
	if err != nil {
		t.Fatalf("read: %v (requests %q)", err, seen)
	}
	if b.Spec.Helm == nil || b.Spec.Helm.Version != "1.0.0" {
		t.Fatalf("helm options = %+v", b.Spec.Helm)
	}
}
