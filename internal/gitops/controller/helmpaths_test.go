package controller_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// TestHelmSecretNameForPaths: as in Rancher Fleet, the keys of the
// helmSecretNameForPaths Secret are bundle paths or filepath.Match globs,
// and with that Secret set helmSecretName is ignored: a path it does not
// list gets no credentials rather than the repository-wide ones.
func TestHelmSecretNameForPaths(t *testing.T) {
	ns := newNamespace(t, "helm-paths")
	charts := helmrepo.New(t, helmrepo.Options{Username: "alice", Password: "s3cret"})
	charts.Publish(t, helmrepo.Chart(t, "app", "1.0.0"))
	root := t.TempDir()
	apps := gittest.NewRepo(t, root, "apps")
	fleetYAML := "helm:\n  repo: " + charts.URL + "\n  chart: app\n"
	c1 := apps.Commit("master", map[string]string{"team/listed/fleet.yaml": fleetYAML, "unlisted/fleet.yaml": fleetYAML})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})

	secret(t, ns, "good", corev1.SecretTypeBasicAuth, map[string][]byte{"username": []byte("alice"), "password": []byte("s3cret")})
	secret(t, ns, "wrong", corev1.SecretTypeBasicAuth, map[string][]byte{"username": []byte("alice"), "password": []byte("nope")})
	secret(t, ns, "by-glob", corev1.SecretTypeOpaque, map[string][]byte{
		"secrets-path.yaml": []byte("team/*:\n  username: alice\n  password: s3cret\n"),
	})

	// The glob names team/listed: its entry is used, not helmSecretName's.
	createRepo(t, ns, "glob", fleet.GitRepoSpec{Repo: srv.URLFor(apps), Paths: []string{"team/listed"},
		HelmSecretName: "wrong", HelmSecretNameForPaths: "by-glob"})
	waitSynced(t, ns, "glob", c1, 1)

	// unlisted is in no entry: no credentials, although helmSecretName
	// holds working ones.
	createRepo(t, ns, "unlisted", fleet.GitRepoSpec{Repo: srv.URLFor(apps), Paths: []string{"unlisted"},
		HelmSecretName: "good", HelmSecretNameForPaths: "by-glob"})
	waitStalled(t, ns, "unlisted", fleet.ConditionReady, "401 Unauthorized (check the Helm credentials)")
	if n := len(bundlesOf(t, ns, "unlisted")); n != 0 {
		t.Fatalf("an unlisted path got %d bundles", n)
	}

	// Without helmSecretNameForPaths, helmSecretName applies to every path.
	createRepo(t, ns, "repo-wide", fleet.GitRepoSpec{Repo: srv.URLFor(apps), Paths: []string{"unlisted"}, HelmSecretName: "good"})
	waitSynced(t, ns, "repo-wide", c1, 1)
}
