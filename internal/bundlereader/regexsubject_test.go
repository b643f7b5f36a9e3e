package bundlereader

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// TestHelmRepoURLRegexSubject: helmRepoURLRegex is matched against the
// string Rancher Fleet matches (shouldAddAuthToRequest): helm.repo as
// written when it is set, else helm.chart as written. So an anchored
// regex written for Rancher gives the same credentials here: for an
// oci:// helm.repo it sees the repository without the chart name, and for
// a git:: chart the whole string, prefix included. It is also matched
// against the URL fetched, as this project did before (the oci://
// reference with the chart's name, the git repository's URL); a regex
// matching neither gets no credentials.
func TestHelmRepoURLRegexSubject(t *testing.T) {
	t.Run("oci repo", func(t *testing.T) {
		host := ociRegistry(t, "bob", "pw", helmrepo.Chart(t, "private", "0.2.0"))
		repo := "oci://" + host + "/charts"
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + repo + "\n  chart: private\n  version: 0.2.0\n"})
		auth := HelmAuth{BasicHTTP: true, Username: "bob", Password: "pw"}

		b, err := readOne(t, dir, Options{Auth: auth, HelmRepoURLRegex: "^" + regexp.QuoteMeta(repo) + "$"})
		if err != nil {
			t.Fatalf("a regex matching helm.repo exactly: %v", err)
		}
		mustHaveChart(t, b, b.Spec.Helm, "private", "0.2.0")

		// The reference fetched, <repo>/<chart>, as before.
		if _, err := readOne(t, dir, Options{Auth: auth, HelmRepoURLRegex: "/charts/private$"}); err != nil {
			t.Fatalf("a regex matching the reference fetched: %v", err)
		}
		// Neither.
		if _, err := readOne(t, dir, Options{Auth: auth, HelmRepoURLRegex: "/other$"}); err == nil {
			t.Fatal("credentials sent for a regex that matches neither helm.repo nor the reference")
		}
	})

	t.Run("oci chart", func(t *testing.T) {
		host := ociRegistry(t, "bob", "pw", helmrepo.Chart(t, "private", "0.2.0"))
		chart := "oci://" + host + "/charts/private"
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + chart + "\n  version: 0.2.0\n"})
		auth := HelmAuth{BasicHTTP: true, Username: "bob", Password: "pw"}
		if _, err := readOne(t, dir, Options{Auth: auth, HelmRepoURLRegex: "^" + regexp.QuoteMeta(chart) + "$"}); err != nil {
			t.Fatalf("a regex matching helm.chart exactly: %v", err)
		}
	})

	t.Run("git over HTTP", func(t *testing.T) {
		root := t.TempDir()
		repo := gittest.NewRepo(t, root, "charts")
		repo.Commit("master", map[string]string{
			"charts/app/Chart.yaml":        "apiVersion: v2\nname: app\nversion: 1.0.0\n",
			"charts/app/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n",
		})
		srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "alice", Password: "s3cret"})
		url := srv.URLFor(repo)
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: git::" + url + "//charts/app\n"})
		auth := HelmAuth{Username: "alice", Password: "s3cret"}

		b, err := readOne(t, dir, Options{Auth: auth, HelmRepoURLRegex: "^git::" + regexp.QuoteMeta(url) + "//charts/app$"})
		if err != nil {
			t.Fatalf("a regex matching the whole helm.chart: %v", err)
		}
		mustHaveChart(t, b, b.Spec.Helm, "app", "1.0.0")

		// The repository URL fetched, as before.
		if _, err := readOne(t, dir, Options{Auth: auth, HelmRepoURLRegex: "^" + regexp.QuoteMeta(url) + "$"}); err != nil {
			t.Fatalf("a regex matching the repository URL: %v", err)
		}
		// Neither.
		_, err = readOne(t, dir, Options{Auth: auth, HelmRepoURLRegex: "^https://other\\."})
		if err == nil || !strings.Contains(err.Error(), "auth") {
			t.Fatalf("err = %v; want the server to refuse a fetch without credentials", err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatal("password in the error")
		}
	})
}
