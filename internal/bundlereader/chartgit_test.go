package bundlereader

import (
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

func TestParseGitChart(t *testing.T) {
	for _, tc := range []struct {
		in            string
		url, dir, ref string
		err           bool
	}{
		{in: "git::https://host/org/charts.git", url: "https://host/org/charts.git"},
		{in: "git::https://host/org/charts.git//app", url: "https://host/org/charts.git", dir: "app"},
		{in: "git::https://host/org/charts.git//charts/app?ref=v1.2.0", url: "https://host/org/charts.git", dir: "charts/app", ref: "v1.2.0"},
		{in: "git::ssh://git@host/org/charts.git//app?ref=main", url: "ssh://git@host/org/charts.git", dir: "app", ref: "main"},
		{in: "git::git@host:org/charts.git//app", url: "git@host:org/charts.git", dir: "app"},
		{in: "git::https://host/org/charts.git//../up", err: true},
		{in: "git::https://host/org/charts.git?depth=1", url: "https://host/org/charts.git"},
		{in: "git::https://host/org/charts.git//app?ref=v1&depth=1", url: "https://host/org/charts.git", dir: "app", ref: "v1"},
		{in: "git::https://host/org/charts.git?sshkey=abc", err: true},
		{in: "git::", err: true},
	} {
		got, err := parseGitChart(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("%s: want an error, got %+v", tc.in, got)
			}
			continue
		}
		if err != nil || got != (gitChart{url: tc.url, dir: tc.dir, ref: tc.ref}) {
			t.Errorf("%s = %+v, %v; want url %q dir %q ref %q", tc.in, got, err, tc.url, tc.dir, tc.ref)
		}
	}
}

func TestChartFromGitRepository(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "charts")
	chart := func(version, data string) map[string]string {
		return map[string]string{
			"charts/app/Chart.yaml":        "apiVersion: v2\nname: app\nversion: " + version + "\n",
			"charts/app/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  v: " + data + "\n",
		}
	}
	repo.Commit("master", chart("1.0.0", "one"))
	repo.Tag("v1.0.0")
	repo.Commit("master", chart("1.1.0", "two"))
	repo.Commit("next", chart("2.0.0", "three"))
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "alice", Password: "s3cret"})
	url := srv.URLFor(repo)
	auth := Options{Auth: HelmAuth{Username: "alice", Password: "s3cret"}}

	template := func(t *testing.T, chart string) string {
		t.Helper()
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + chart + "\n"})
		b, err := readOne(t, dir, auth)
		if err != nil {
			t.Fatal(err)
		}
		mustHaveChart(t, b, b.Spec.Helm, "app", b.Spec.Helm.Version)
		for _, r := range b.Spec.Resources {
			if r.Name == b.Spec.Helm.Chart+"/templates/cm.yaml" {
				return b.Spec.Helm.Version + " " + strings.TrimSpace(r.Content[strings.LastIndex(r.Content, "v: ")+3:])
			}
		}
		t.Fatalf("no template in %v", resourceNames(b))
		return ""
	}
	for name, tc := range map[string]struct{ chart, want string }{
		"default branch": {"git::" + url + "//charts/app", "1.1.0 two"},
		"tag":            {"git::" + url + "//charts/app?ref=v1.0.0", "1.0.0 one"},
		"branch":         {"git::" + url + "//charts/app?ref=next", "2.0.0 three"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := template(t, tc.chart); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}

	for name, tc := range map[string]struct {
		chart, want string
		opts        Options
	}{
		"missing ref":       {"git::" + url + "//charts/app?ref=v9", "v9", auth},
		"missing directory": {"git::" + url + "//charts/nope", `no directory "charts/nope"`, auth},
		"no credentials":    {"git::" + url + "//charts/app", "auth", Options{}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + tc.chart + "\n"})
			_, err := readOne(t, dir, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatal("password in the error")
			}
		})
	}
}

// FuzzParseGitChart: any helm.chart string parses or is refused; a parsed
// one never names a directory outside the repository.
func FuzzParseGitChart(f *testing.F) {
	for _, s := range []string{"git::https://h/o/r.git//a/b?ref=v1", "git::git@h:o/r.git//x", "git::https://h/r//../x", "git::?ref=", "git::a//b//c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := parseGitChart(s)
		if err != nil {
			return
		}
		if g.url == "" || strings.HasPrefix(g.dir, "/") {
			t.Fatalf("%q parsed to %+v", s, g)
		}
		for _, part := range strings.Split(g.dir, "/") {
			if part == ".." {
				t.Fatalf("%q escapes: %+v", s, g)
			}
		}
	})
}
