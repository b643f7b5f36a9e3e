package bundlereader

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

func readOne(t *testing.T, dir string, opts Options) (*fleet.Bundle, error) {
	t.Helper()
	bs, err := Read(context.Background(), "test", dir, nil, opts)
	if err != nil {
		return nil, err
	}
	if len(bs) != 1 {
		t.Fatalf("got %d bundles, want 1", len(bs))
	}
	return bs[0], nil
}

func resourceNames(b *fleet.Bundle) map[string]string {
	out := map[string]string{}
	for _, r := range b.Spec.Resources {
		out[r.Name] = r.Encoding
	}
	return out
}

func mustHaveChart(t *testing.T, b *fleet.Bundle, h *fleet.HelmOptions, name, version string) {
	t.Helper()
	if h == nil || !strings.HasPrefix(h.Chart, ".chart/") || !strings.HasSuffix(h.Chart, "/"+name) {
		t.Fatalf("helm.chart = %+v, want .chart/<hash>/%s", h, name)
	}
	if h.Version != version || h.Repo != "" {
		t.Errorf("helm version %q repo %q, want %q and no repo", h.Version, h.Repo, version)
	}
	res := resourceNames(b)
	for _, f := range []string{"Chart.yaml", "templates/cm.yaml"} {
		if _, ok := res[h.Chart+"/"+f]; !ok {
			t.Errorf("resource %s/%s missing; have %v", h.Chart, f, res)
		}
	}
}

func TestChartFromHTTPRepository(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{})
	for _, v := range []string{"1.0.0", "1.2.0", "2.0.0"} {
		srv.Publish(t, helmrepo.Chart(t, "mychart", v))
	}
	dir := writeRepo(t, map[string]string{"fleet.yaml": `
helm:
  repo: ` + srv.URL + `
  chart: mychart
  version: "^1.0"
targetCustomizations:
- name: v2
  clusterGroup: next
  helm:
    version: 2.0.0
- name: values-only
  clusterGroup: other
  helm:
    values: {a: b}
`})
	b, err := readOne(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustHaveChart(t, b, b.Spec.Helm, "mychart", "1.2.0")
	mustHaveChart(t, b, b.Spec.Targets[0].Helm, "mychart", "2.0.0")
	if b.Spec.Targets[0].Helm.Chart == b.Spec.Helm.Chart {
		t.Error("different versions must be stored under different paths")
	}
	if got := b.Spec.Targets[1].Helm; got.Chart != b.Spec.Helm.Chart || got.Version != "1.2.0" {
		t.Errorf("values-only customization got chart %q %q, want the root chart", got.Chart, got.Version)
	}

	t.Run("chart URL", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + srv.URL + "/mychart-1.0.0.tgz\n"})
		b, err := readOne(t, dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		mustHaveChart(t, b, b.Spec.Helm, "mychart", "1.0.0")
	})
	t.Run("missing version", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: mychart\n  version: '>=3'\n"})
		_, err := readOne(t, dir, Options{})
		if err == nil || !strings.Contains(err.Error(), `chart "mychart" version ">=3" not found`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing chart", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: nope\n"})
		_, err := readOne(t, dir, Options{})
		if err == nil || !strings.Contains(err.Error(), `chart "nope" not found`) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestChartRepositoryAuthAndTLS(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{Username: "alice", Password: "s3cret", TLS: true})
	srv.Publish(t, helmrepo.Chart(t, "secure", "0.1.0"))
	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: secure\n"})
	good := HelmAuth{Username: "alice", Password: "s3cret", CABundle: srv.CAPEM()}

	cases := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "unknown CA", opts: Options{Auth: HelmAuth{Username: "alice", Password: "s3cret"}}, wantErr: "certificate"},
		{name: "no credentials", opts: Options{Auth: HelmAuth{CABundle: srv.CAPEM()}}, wantErr: "401 Unauthorized (check the Helm credentials)"},
		{name: "wrong password", opts: Options{Auth: HelmAuth{Username: "alice", Password: "x", CABundle: srv.CAPEM()}}, wantErr: "401"},
		{name: "regex excludes repo", opts: Options{Auth: good, HelmRepoURLRegex: "^https://elsewhere"}, wantErr: "401"},
		{name: "private CA", opts: Options{Auth: good}},
		{name: "insecure", opts: Options{Auth: HelmAuth{Username: "alice", Password: "s3cret", InsecureSkipTLS: true}}},
		{name: "regex matches", opts: Options{Auth: good, HelmRepoURLRegex: "^https://127"}},
		{name: "by path", opts: Options{AuthByPath: map[string]HelmAuth{".": good}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := readOne(t, dir, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("error leaks the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mustHaveChart(t, b, b.Spec.Helm, "secure", "0.1.0")
		})
	}
	t.Run("chart URL with basic auth", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + srv.URL + "/secure-0.1.0.tgz\n"})
		if _, err := readOne(t, dir, Options{Auth: HelmAuth{CABundle: srv.CAPEM()}}); err == nil || !strings.Contains(err.Error(), "401") {
			t.Fatalf("err = %v, want 401", err)
		}
		b, err := readOne(t, dir, Options{Auth: good})
		if err != nil {
			t.Fatal(err)
		}
		mustHaveChart(t, b, b.Spec.Helm, "secure", "0.1.0")
	})
}

func TestChartFromOCIRegistry(t *testing.T) {
	host := ociRegistry(t, "", "", helmrepo.Chart(t, "ocichart", "1.0.0"), helmrepo.Chart(t, "ocichart", "1.1.0"))
	cases := []struct {
		name, fleetYAML, version string
	}{
		{name: "constraint", fleetYAML: "helm:\n  chart: oci://" + host + "/charts/ocichart\n  version: '~1.0.0'\n", version: "1.0.0"},
		{name: "latest", fleetYAML: "helm:\n  chart: oci://" + host + "/charts/ocichart\n", version: "1.1.0"},
		{name: "exact", fleetYAML: "helm:\n  chart: oci://" + host + "/charts/ocichart\n  version: 1.1.0\n", version: "1.1.0"},
		{name: "oci repo", fleetYAML: "helm:\n  repo: oci://" + host + "/charts\n  chart: ocichart\n  version: 1.0.0\n", version: "1.0.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := readOne(t, writeRepo(t, map[string]string{"fleet.yaml": tc.fleetYAML}), Options{Auth: HelmAuth{BasicHTTP: true}})
			if err != nil {
				t.Fatal(err)
			}
			mustHaveChart(t, b, b.Spec.Helm, "ocichart", tc.version)
		})
	}
	t.Run("basic auth", func(t *testing.T) {
		host := ociRegistry(t, "bob", "pw", helmrepo.Chart(t, "private", "0.2.0"))
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: oci://" + host + "/charts/private\n  version: 0.2.0\n"})
		if _, err := readOne(t, dir, Options{Auth: HelmAuth{BasicHTTP: true}}); err == nil {
			t.Fatal("pull without credentials succeeded")
		}
		b, err := readOne(t, dir, Options{Auth: HelmAuth{BasicHTTP: true, Username: "bob", Password: "pw"}})
		if err != nil {
			t.Fatal(err)
		}
		mustHaveChart(t, b, b.Spec.Helm, "private", "0.2.0")
	})
}

func TestChartDependencies(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{})
	srv.Publish(t, helmrepo.Chart(t, "dep", "1.0.0"))
	srv.Publish(t, helmrepo.Chart(t, "parent", "1.0.0", &chartv2.Dependency{Name: "dep", Version: "1.x", Repository: srv.URL}))
	files := map[string]string{
		"fleet.yaml":                "helm:\n  chart: chart\n",
		"chart/Chart.yaml":          "apiVersion: v2\nname: local\nversion: 0.1.0\ndependencies:\n- name: dep\n  version: 1.0.0\n  repository: " + srv.URL + "\n- name: sibling\n  version: 0.1.0\n  repository: file://../sibling\n",
		"chart/templates/cm.yaml":   "kind: ConfigMap\n",
		"sibling/Chart.yaml":        "apiVersion: v2\nname: sibling\nversion: 0.1.0\n",
		"sibling/templates/cm.yaml": "kind: ConfigMap\n",
	}
	b, err := readOne(t, writeRepo(t, files), Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := resourceNames(b)
	for _, want := range []string{"chart/charts/dep/Chart.yaml", "chart/charts/dep/templates/cm.yaml", "chart/charts/sibling/Chart.yaml"} {
		if _, ok := res[want]; !ok {
			t.Errorf("dependency file %s missing: %v", want, res)
		}
	}
	t.Run("disableDependencyUpdate", func(t *testing.T) {
		files["fleet.yaml"] = "helm:\n  chart: chart\n  disableDependencyUpdate: true\n"
		b, err := readOne(t, writeRepo(t, files), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := resourceNames(b)["chart/charts/dep/Chart.yaml"]; ok {
			t.Error("dependency downloaded although disabled")
		}
	})
	t.Run("from repository", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: parent\n"})
		b, err := readOne(t, dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := resourceNames(b)[b.Spec.Helm.Chart+"/charts/dep/Chart.yaml"]; !ok {
			t.Errorf("dependency of a downloaded chart missing: %v", resourceNames(b))
		}
	})
}

func TestChartZipBombRefused(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{})
	srv.PutFile("bomb-1.0.0.tgz", zipBomb(t, 8<<20))
	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + srv.URL + "/bomb-1.0.0.tgz\n"})
	_, err := readOne(t, dir, Options{Limits: Limits{MaxChartUncompressed: 2 << 20, MaxFileSize: 16 << 20}})
	if err == nil || !strings.Contains(err.Error(), "zip bomb") {
		t.Fatalf("err = %v, want a zip bomb error", err)
	}
	_, err = readOne(t, dir, Options{Limits: Limits{MaxFileSize: 1 << 20}})
	if err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Fatalf("err = %v, want a file size error", err)
	}
}

func TestChartBadRepositoryContent(t *testing.T) {
	cases := []struct{ name, index, fleetYAML, want string }{
		{name: "nil entries", index: "apiVersion: v1\nentries:\n  x: [null, {name: x}]\n", want: `chart "x" not found`},
		{name: "not a helm repo", index: "<html>hello</html>", want: "invalid index.yaml"},
		{name: "no apiVersion", index: "entries: {}\n", want: "no apiVersion"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(tc.index)) }))
			defer srv.Close()
			_, err := readOne(t, writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: x\n"}), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	_, err := readOne(t, writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: https://example.invalid\n"}), Options{})
	if err == nil || !strings.Contains(err.Error(), "helm.chart is empty") {
		t.Fatalf("repo without chart: err = %v", err)
	}
}

func TestChartUnreachableRepository(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{})
	url := srv.URL
	srv.Close()
	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + url + "\n  chart: x\n"})
	_, err := readOne(t, dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "cannot reach "+url+"/index.yaml") {
		t.Fatalf("err = %v", err)
	}
}

// credRepo serves files (path -> body) and 404 for the rest. It returns the
// server's host:port.
func credRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, ok := files[strings.TrimPrefix(req.URL.Path, "/")]
		if !ok {
			http.NotFound(w, req)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestChartErrorsRedactCredentials: a repository URL with user:password
// must never show the password in an error (it ends up in HelmOp and
// GitRepo status, events and logs); the host must still be named.
func TestChartErrorsRedactCredentials(t *testing.T) {
	const password = "s3cr3t"
	index := "apiVersion: v1\nentries:\n  x:\n  - name: x\n    version: 1.0.0\n    urls: [x-1.0.0.tgz]\n"
	cases := []struct {
		name  string
		files map[string]string
		helm  func(u string) string // fleet.yaml helm section for the URL with credentials
	}{
		{name: "repository 404", helm: func(u string) string { return "repo: " + u + "\n  chart: x\n" }},
		{name: "invalid index", files: map[string]string{"index.yaml": "<html></html>"},
			helm: func(u string) string { return "repo: " + u + "\n  chart: x\n" }},
		{name: "index without apiVersion", files: map[string]string{"index.yaml": "entries: {}\n"},
			helm: func(u string) string { return "repo: " + u + "\n  chart: x\n" }},
		{name: "chart not in index", files: map[string]string{"index.yaml": index},
			helm: func(u string) string { return "repo: " + u + "\n  chart: other\n" }},
		{name: "version not in index", files: map[string]string{"index.yaml": index},
			helm: func(u string) string { return "repo: " + u + "\n  chart: x\n  version: 9.0.0\n" }},
		{name: "archive 404", files: map[string]string{"index.yaml": index},
			helm: func(u string) string { return "repo: " + u + "\n  chart: x\n" }},
		{name: "bad archive", files: map[string]string{"index.yaml": index, "x-1.0.0.tgz": "not a chart"},
			helm: func(u string) string { return "repo: " + u + "\n  chart: x\n" }},
		{name: "chart URL bad archive", files: map[string]string{"x.tgz": "not a chart"},
			helm: func(u string) string { return "chart: " + u + "/x.tgz\n" }},
		{name: "chart URL 404", helm: func(u string) string { return "chart: " + u + "/x.tgz\n" }},
		{name: "repo without chart", helm: func(u string) string { return "repo: " + u + "\n" }},
		{name: "oci chart", helm: func(u string) string {
			return "chart: oci://" + strings.TrimPrefix(u, "http://") + "/charts/x\n  version: 1.0.0\n"
		}},
		{name: "oci chart constraint", helm: func(u string) string {
			return "chart: oci://" + strings.TrimPrefix(u, "http://") + "/charts/x\n  version: ^1.0.0\n"
		}},
		{name: "oci repo", helm: func(u string) string {
			return "repo: oci://" + strings.TrimPrefix(u, "http://") + "/charts\n  chart: x\n"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			host := credRepo(t, tc.files)
			u := "http://fleet:" + password + "@" + host
			dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  " + tc.helm(u)})
			_, err := readOne(t, dir, Options{Auth: HelmAuth{BasicHTTP: true}})
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), password) {
				t.Fatalf("error leaks the password: %v", err)
			}
			if !strings.Contains(err.Error(), host) {
				t.Fatalf("error does not name the host %s: %v", host, err)
			}
		})
	}
	t.Run("dependency repository", func(t *testing.T) {
		host := credRepo(t, nil)
		dir := writeRepo(t, map[string]string{
			"fleet.yaml":       "helm:\n  chart: chart\n",
			"chart/Chart.yaml": "apiVersion: v2\nname: local\nversion: 0.1.0\ndependencies:\n- name: dep\n  version: 1.0.0\n  repository: http://fleet:" + password + "@" + host + "\n",
		})
		_, err := readOne(t, dir, Options{})
		if err == nil || strings.Contains(err.Error(), password) || !strings.Contains(err.Error(), host) {
			t.Fatalf("err = %v, want an error naming %s without the password", err, host)
		}
	})
	t.Run("HelmOp", func(t *testing.T) {
		host := credRepo(t, nil)
		_, err := ReadHelmOp(context.Background(), "op", &fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
			Helm: &fleet.HelmOptions{Repo: "http://fleet:" + password + "@" + host, Chart: "x"},
		}}, Options{})
		if err == nil || strings.Contains(err.Error(), password) || !strings.Contains(err.Error(), host) {
			t.Fatalf("err = %v, want an error naming %s without the password", err, host)
		}
	})
}

// TestChartInvalidVersion: a version that is neither a version nor a semver
// constraint is an input error callers can tell from a repository failure
// (errors.Is ErrInvalidVersion, and ErrInvalidSpec for a HelmOp), naming
// the version, whatever the chart source.
func TestChartInvalidVersion(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{})
	srv.Publish(t, helmrepo.Chart(t, "mychart", "1.0.0"))
	down := helmrepo.New(t, helmrepo.Options{})
	downURL := down.URL
	down.Close()
	host := ociRegistry(t, "", "", helmrepo.Chart(t, "ocichart", "1.0.0"))
	for _, version := range []string{"1.x.y.z", ">= foo"} {
		cases := []struct{ name, fleetYAML string }{
			{name: "repository", fleetYAML: "helm:\n  repo: " + srv.URL + "\n  chart: mychart\n  version: '" + version + "'\n"},
			{name: "unreachable repository", fleetYAML: "helm:\n  repo: " + downURL + "\n  chart: mychart\n  version: '" + version + "'\n"},
			{name: "oci chart", fleetYAML: "helm:\n  chart: oci://" + host + "/charts/ocichart\n  version: '" + version + "'\n"},
			{name: "oci repo", fleetYAML: "helm:\n  repo: oci://" + host + "/charts\n  chart: ocichart\n  version: '" + version + "'\n"},
			{name: "target customization", fleetYAML: "helm:\n  repo: " + srv.URL + "\n  chart: mychart\ntargetCustomizations:\n- name: t\n  clusterGroup: g\n  helm:\n    version: '" + version + "'\n"},
		}
		for _, tc := range cases {
			t.Run(tc.name+" "+version, func(t *testing.T) {
				_, err := readOne(t, writeRepo(t, map[string]string{"fleet.yaml": tc.fleetYAML}), Options{Auth: HelmAuth{BasicHTTP: true}})
				if !errors.Is(err, ErrInvalidVersion) {
					t.Fatalf("err = %v, want ErrInvalidVersion", err)
				}
				if !strings.Contains(err.Error(), `"`+version+`"`) {
					t.Errorf("err = %v, want it to name the version %q", err, version)
				}
			})
		}
		t.Run("dependency "+version, func(t *testing.T) {
			dir := writeRepo(t, map[string]string{
				"fleet.yaml":       "helm:\n  chart: chart\n",
				"chart/Chart.yaml": "apiVersion: v2\nname: local\nversion: 0.1.0\ndependencies:\n- name: mychart\n  version: '" + version + "'\n  repository: " + srv.URL + "\n",
			})
			_, err := readOne(t, dir, Options{})
			if !errors.Is(err, ErrInvalidVersion) || !strings.Contains(err.Error(), `"`+version+`"`) {
				t.Fatalf("err = %v, want ErrInvalidVersion naming %q", err, version)
			}
		})
		t.Run("HelmOp "+version, func(t *testing.T) {
			_, err := ReadHelmOp(context.Background(), "op", &fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				Helm: &fleet.HelmOptions{Repo: srv.URL, Chart: "mychart", Version: version},
			}}, Options{})
			if !errors.Is(err, ErrInvalidVersion) || !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("err = %v, want ErrInvalidVersion and ErrInvalidSpec", err)
			}
		})
	}
	// A repository failure or a version that is valid but missing is not
	// an input error of this kind.
	for _, fy := range []string{
		"helm:\n  repo: " + downURL + "\n  chart: mychart\n  version: 1.0.0\n",
		"helm:\n  repo: " + srv.URL + "\n  chart: mychart\n  version: '>=3'\n",
	} {
		_, err := readOne(t, writeRepo(t, map[string]string{"fleet.yaml": fy}), Options{})
		if err == nil || errors.Is(err, ErrInvalidVersion) {
			t.Errorf("err = %v, want an error that is not ErrInvalidVersion", err)
		}
	}
}

// TestRedact: user info is masked, whatever the form of the URL, and the
// host stays.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://fleet:s3cr3t@charts.example.com/x":             "https://***@charts.example.com/x",
		"https://token@charts.example.com":                      "https://***@charts.example.com",
		"https://charts.example.com/a@b":                        "https://charts.example.com/a@b",
		"oci://fleet:s3cr3t@reg.example.com/charts":             "oci://***@reg.example.com/charts",
		"git::https://u:s3cr3t@git.example.com/r//chart?ref=v1": "git::https://***@git.example.com/r//chart?ref=v1",
		// Unparsable: the authority up to the last "@" is masked.
		"https://fleet:s3c/r3t@charts.example.com/x":  "https://***@charts.example.com/x",
		"https://fleet:s3cr3t%zz@charts.example.com/": "https://***@charts.example.com/",
		"https://fleet:s3c#r3t@charts.example.com/":   "https://***@charts.example.com/",
		"charts/local": "charts/local",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
	if got := redactRef("fleet:s3cr3t@reg.example.com/charts/x"); got != "***@reg.example.com/charts/x" {
		t.Errorf("redactRef = %q", got)
	}
}
