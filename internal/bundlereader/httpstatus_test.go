package bundlereader

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

const statusPassword = "s3cretStatusPW"

// statusRepo serves a Helm repository whose index.yaml lists chart x
// 1.0.0 at x-1.0.0.tgz, and answers the paths in failing with their
// status instead. It returns the repository URL with user:password in it.
func statusRepo(t *testing.T, failing map[string]int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if code, ok := failing[req.URL.Path]; ok {
			http.Error(w, http.StatusText(code), code)
			return
		}
		if req.URL.Path == "/index.yaml" {
			_, _ = w.Write([]byte("apiVersion: v1\nentries:\n  x:\n  - name: x\n    version: 1.0.0\n    urls: [x-1.0.0.tgz]\n"))
			return
		}
		http.NotFound(w, req)
	}))
	t.Cleanup(srv.Close)
	return "http://fleet:" + statusPassword + "@" + strings.TrimPrefix(srv.URL, "http://")
}

// checkStatusError asserts that err is, through the reader's wrapping, an
// *HTTPStatusError with code, that IsTemporary says temporary, that the
// message still reads want (today's wording) and that it quotes no
// password.
func checkStatusError(t *testing.T, err error, code int, temporary bool, want string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	var status *HTTPStatusError
	if !errors.As(err, &status) {
		t.Fatalf("errors.As(*HTTPStatusError) = false for %v (%T)", err, err)
	}
	if status.StatusCode != code {
		t.Errorf("StatusCode = %d, want %d", status.StatusCode, code)
	}
	if got := IsTemporary(err); got != temporary {
		t.Errorf("IsTemporary = %v, want %v for %v", got, temporary, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not read %q", err, want)
	}
	if strings.Contains(err.Error(), statusPassword) || strings.Contains(status.URL, statusPassword) {
		t.Errorf("error quotes the password: %q", err)
	}
}

// TestHTTPStatusErrorTyped: a chart repository answering an index, chart
// archive, chart URL or dependency request with an error status fails the
// read with an *HTTPStatusError that IsTemporary classifies (5xx, 429, 408:
// retry; 401, 404: fix the input), its message worded as before and its
// URL redacted.
func TestHTTPStatusErrorTyped(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failing   map[string]int
		fleetYAML func(repo string) string
		chart     func(repo string) string // a local chart's Chart.yaml, when set
		code      int
		temporary bool
		want      func(shown string) string // the message, given the redacted repository URL
	}{
		{
			name:      "index 503",
			failing:   map[string]int{"/index.yaml": http.StatusServiceUnavailable},
			fleetYAML: func(repo string) string { return "helm:\n  repo: " + repo + "\n  chart: x\n" },
			code:      http.StatusServiceUnavailable, temporary: true,
			want: func(shown string) string {
				return "helm repository " + shown + ": GET " + shown + "/index.yaml: 503 Service Unavailable"
			},
		},
		{
			name:      "archive 502",
			failing:   map[string]int{"/x-1.0.0.tgz": http.StatusBadGateway},
			fleetYAML: func(repo string) string { return "helm:\n  repo: " + repo + "\n  chart: x\n" },
			code:      http.StatusBadGateway, temporary: true,
			want: func(shown string) string { return "GET " + shown + "/x-1.0.0.tgz: 502 Bad Gateway" },
		},
		{
			name:      "index 429",
			failing:   map[string]int{"/index.yaml": http.StatusTooManyRequests},
			fleetYAML: func(repo string) string { return "helm:\n  repo: " + repo + "\n  chart: x\n" },
			code:      http.StatusTooManyRequests, temporary: true,
			want: func(shown string) string { return "GET " + shown + "/index.yaml: 429 Too Many Requests" },
		},
		{
			name:      "index 408",
			failing:   map[string]int{"/index.yaml": http.StatusRequestTimeout},
			fleetYAML: func(repo string) string { return "helm:\n  repo: " + repo + "\n  chart: x\n" },
			code:      http.StatusRequestTimeout, temporary: true,
			want: func(shown string) string { return "GET " + shown + "/index.yaml: 408 Request Timeout" },
		},
		{
			name:      "archive 404",
			failing:   map[string]int{"/x-1.0.0.tgz": http.StatusNotFound},
			fleetYAML: func(repo string) string { return "helm:\n  repo: " + repo + "\n  chart: x\n" },
			code:      http.StatusNotFound, temporary: false,
			want: func(shown string) string { return "GET " + shown + "/x-1.0.0.tgz: 404 Not Found" },
		},
		{
			name:      "index 401",
			failing:   map[string]int{"/index.yaml": http.StatusUnauthorized},
			fleetYAML: func(repo string) string { return "helm:\n  repo: " + repo + "\n  chart: x\n" },
			code:      http.StatusUnauthorized, temporary: false,
			want: func(shown string) string {
				return "GET " + shown + "/index.yaml: 401 Unauthorized (check the Helm credentials)"
			},
		},
		{
			name:      "chart URL 503",
			failing:   map[string]int{"/x-1.0.0.tgz": http.StatusServiceUnavailable},
			fleetYAML: func(repo string) string { return "helm:\n  chart: " + repo + "/x-1.0.0.tgz\n" },
			code:      http.StatusServiceUnavailable, temporary: true,
			want: func(shown string) string {
				return "helm.chart: GET " + shown + "/x-1.0.0.tgz: 503 Service Unavailable"
			},
		},
		{
			name:      "dependency index 504",
			failing:   map[string]int{"/index.yaml": http.StatusGatewayTimeout},
			fleetYAML: func(string) string { return "helm:\n  chart: chart\n" },
			chart: func(repo string) string {
				return "apiVersion: v2\nname: local\nversion: 0.1.0\ndependencies:\n- name: x\n  version: 1.0.0\n  repository: " + repo + "\n"
			},
			code: http.StatusGatewayTimeout, temporary: true,
			want: func(shown string) string {
				return `dependency "x": helm repository ` + shown + ": GET " + shown + "/index.yaml: 504 Gateway Timeout"
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repoURL := statusRepo(t, tc.failing)
			files := map[string]string{"fleet.yaml": tc.fleetYAML(repoURL)}
			if tc.chart != nil {
				files["chart/Chart.yaml"] = tc.chart(repoURL)
			}
			_, err := readOne(t, writeRepo(t, files), Options{})
			checkStatusError(t, err, tc.code, tc.temporary, tc.want(redact(repoURL)))
		})
	}
}

// TestHTTPStatusErrorReadHelmOp: a HelmOp's repository answering 503 is a
// temporary *HTTPStatusError too, not an ErrInvalidSpec.
func TestHTTPStatusErrorReadHelmOp(t *testing.T) {
	repoURL := statusRepo(t, map[string]int{"/index.yaml": http.StatusServiceUnavailable})
	_, err := ReadHelmOp(context.Background(), "op", &fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
		Helm: &fleet.HelmOptions{Repo: repoURL, Chart: "x"},
	}}, Options{})
	shown := redact(repoURL)
	checkStatusError(t, err, http.StatusServiceUnavailable, true,
		"helm repository "+shown+": GET "+shown+"/index.yaml: 503 Service Unavailable")
	if errors.Is(err, ErrInvalidSpec) {
		t.Errorf("a 503 is ErrInvalidSpec: %v", err)
	}
}

// TestIsTemporaryOCIRegistry: an OCI registry answering a chart pull or a
// tag listing with 503 or 429 is temporary, one answering 404 is not.
func TestIsTemporaryOCIRegistry(t *testing.T) {
	for _, tc := range []struct {
		name      string
		code      int
		version   string // exact: pulled directly; a constraint: tags listed first
		temporary bool
	}{
		{name: "pull 503", code: http.StatusServiceUnavailable, version: "1.0.0", temporary: true},
		{name: "tags 503", code: http.StatusServiceUnavailable, version: "^1.0", temporary: true},
		{name: "pull 429", code: http.StatusTooManyRequests, version: "1.0.0", temporary: true},
		{name: "pull 404", code: http.StatusNotFound, version: "1.0.0", temporary: false},
		{name: "tags 404", code: http.StatusNotFound, version: "^1.0", temporary: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				http.Error(w, http.StatusText(tc.code), tc.code)
			}))
			t.Cleanup(srv.Close)
			host := strings.TrimPrefix(srv.URL, "http://")
			fleetYAML := "helm:\n  chart: oci://" + host + "/charts/x\n  version: \"" + tc.version + "\"\n"
			_, err := readOne(t, writeRepo(t, map[string]string{"fleet.yaml": fleetYAML}), Options{Auth: HelmAuth{BasicHTTP: true}})
			if err == nil {
				t.Fatal("no error")
			}
			t.Logf("%v", err)
			if got := IsTemporary(err); got != tc.temporary {
				t.Errorf("IsTemporary = %v, want %v for %v (%T)", got, tc.temporary, err, err)
			}
			// A 404 on a manifest is oras' errdef.ErrNotFound ("not found").
			if tc.temporary && !strings.Contains(err.Error(), "response status code "+strconv.Itoa(tc.code)) {
				t.Errorf("error %q is not the registry's answer %d", err, tc.code)
			}
		})
	}
}
