package controller_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// TestInsecureSkipTLSVerifyCoversCharts: as in Rancher Fleet, a GitRepo's
// insecureSkipTLSVerify also skips TLS verification for the charts its
// fleet.yamls name, on an HTTPS chart repository and in a git:: source
// over HTTPS, whether or not a helm Secret is set (one without
// insecureSkipVerify does not turn it off). Without it, the self-signed
// certificates stall the GitRepo with the x509 error and nothing is built.
func TestInsecureSkipTLSVerifyCoversCharts(t *testing.T) {
	ns := newNamespace(t, "helm-insecure")
	charts := helmrepo.New(t, helmrepo.Options{TLS: true})
	charts.Publish(t, helmrepo.Chart(t, "app", "1.2.3"))
	root := t.TempDir()
	gitCharts := gittest.NewRepo(t, root, "charts")
	gitCharts.Commit("master", map[string]string{
		"gitapp/Chart.yaml":        "apiVersion: v2\nname: gitapp\nversion: 2.0.0\n",
		"gitapp/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gitapp\ndata:\n  v: from-https-git\n",
	})
	gitTLS := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{TLS: true})
	apps := gittest.NewRepo(t, root, "apps")
	c1 := apps.Commit("master", map[string]string{
		"repo-chart/fleet.yaml": "helm:\n  repo: " + charts.URL + "\n  chart: app\n",
		"git-chart/fleet.yaml":  "helm:\n  chart: git::" + gitTLS.URLFor(gitCharts) + "//gitapp\n",
	})
	// The GitRepos are cloned over plain HTTP: only the charts use TLS.
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	secret(t, ns, "helm-creds", corev1.SecretTypeOpaque, map[string][]byte{"username": []byte("u"), "password": []byte("p")})

	for _, path := range []string{"repo-chart", "git-chart"} {
		name := path + "-verified"
		createRepo(t, ns, name, fleet.GitRepoSpec{Repo: srv.URLFor(apps), Paths: []string{path}})
		waitStalled(t, ns, name, fleet.ConditionReady, "x509")
		if n := len(bundlesOf(t, ns, name)); n != 0 {
			t.Fatalf("%s: an unverified chart server produced %d bundles", name, n)
		}
	}

	for name, spec := range map[string]fleet.GitRepoSpec{
		"insecure":             {Repo: srv.URLFor(apps), InsecureSkipTLSverify: true},
		"insecure-helm-secret": {Repo: srv.URLFor(apps), InsecureSkipTLSverify: true, HelmSecretName: "helm-creds"},
	} {
		createRepo(t, ns, name, spec)
		waitSynced(t, ns, name, c1, 2)
		fleettest.Eventually(t, timeout, func() error { return chartsBuilt(t, ns, name) })
	}
}

// chartsBuilt checks that repo's Bundles hold the chart of the HTTPS chart
// repository (app 1.2.3) and the one of the git:: source (gitapp 2.0.0).
func chartsBuilt(t *testing.T, ns, repo string) error {
	t.Helper()
	want := map[string]string{"1.2.3": "version: 1.2.3", "2.0.0": "v: from-https-git"}
	for _, b := range bundlesOf(t, ns, repo) {
		h := b.Spec.Helm
		if h == nil || !strings.HasPrefix(h.Chart, ".chart/") {
			return fmt.Errorf("bundle %s: helm %+v, want a downloaded chart", b.Name, h)
		}
		content := resourceContent(b, h.Chart+"/templates/cm.yaml")
		if s, ok := want[h.Version]; !ok || !strings.Contains(content, s) {
			return fmt.Errorf("bundle %s: chart %s with %q", b.Name, h.Version, content)
		}
		delete(want, h.Version)
	}
	if len(want) > 0 {
		return fmt.Errorf("charts missing: %v", want)
	}
	return nil
}
