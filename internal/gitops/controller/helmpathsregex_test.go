package controller_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// TestHelmSecretForPathsIgnoresURLRegex: as in Rancher Fleet, whose gitjob
// passes helmRepoURLRegex to fleet apply only with helmSecretName, the
// credentials of a helmSecretNameForPaths entry reach the chart repository
// of their path although the regex does not match its URL: the chart is
// downloaded into the Bundle. The same regex still keeps helmSecretName's
// credentials from that repository.
func TestHelmSecretForPathsIgnoresURLRegex(t *testing.T) {
	ns := newNamespace(t, "helm-paths-regex")
	charts := helmrepo.New(t, helmrepo.Options{Username: "alice", Password: "s3cret"})
	charts.Publish(t, helmrepo.Chart(t, "app", "1.0.0"))
	root := t.TempDir()
	apps := gittest.NewRepo(t, root, "apps")
	c1 := apps.Commit("master", map[string]string{"app/fleet.yaml": "helm:\n  repo: " + charts.URL + "\n  chart: app\n"})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	secret(t, ns, "by-path", corev1.SecretTypeOpaque, map[string][]byte{
		"secrets-path.yaml": []byte("app:\n  username: alice\n  password: s3cret\n"),
	})
	secret(t, ns, "repo-wide", corev1.SecretTypeBasicAuth, map[string][]byte{"username": []byte("alice"), "password": []byte("s3cret")})
	const otherHost = `^https://charts\.example\.com/`

	createRepo(t, ns, "by-path", fleet.GitRepoSpec{Repo: srv.URLFor(apps), Paths: []string{"app"},
		HelmSecretNameForPaths: "by-path", HelmRepoURLRegex: otherHost})
	waitSynced(t, ns, "by-path", c1, 1)
	for name, b := range bundlesOf(t, ns, "by-path") {
		if !hasChartFile(b) {
			t.Fatalf("bundle %s holds no downloaded chart: %v", name, resourceNames(b))
		}
	}

	createRepo(t, ns, "repo-wide", fleet.GitRepoSpec{Repo: srv.URLFor(apps), Paths: []string{"app"},
		HelmSecretName: "repo-wide", HelmRepoURLRegex: otherHost})
	waitStalled(t, ns, "repo-wide", fleet.ConditionReady, "401 Unauthorized")
	if n := len(bundlesOf(t, ns, "repo-wide")); n != 0 {
		t.Fatalf("the regex let helmSecretName's credentials through: %d bundles", n)
	}
}

// hasChartFile says whether b holds the Chart.yaml of a downloaded chart.
func hasChartFile(b fleet.Bundle) bool {
	for _, r := range b.Spec.Resources {
		if strings.HasPrefix(r.Name, ".chart/") && strings.HasSuffix(r.Name, "/Chart.yaml") {
			return true
		}
	}
	return false
}

func resourceNames(b fleet.Bundle) []string {
	out := make([]string, 0, len(b.Spec.Resources))
	for _, r := range b.Spec.Resources {
		out = append(out, r.Name)
	}
	return out
}
