package controller_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// TestGitHubAppOnlyForGitHub: GitHub App credentials are used with a
// GitHub Enterprise Server only when the Secret names its API; a GitRepo
// pointing them at any other host (here a server that would issue tokens)
// is Stalled with a message saying so, and the host never gets the App's
// JWT. With github_app_api_url the same server is used and the GitRepo
// syncs.
func TestGitHubAppOnlyForGitHub(t *testing.T) {
	ns := newNamespace(t, "github-app")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	app := &gittest.GitHubApp{AppID: 42, InstallationID: 7, PublicKey: &key.PublicKey}
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{TLS: true, GitHubApp: app})
	data := map[string][]byte{git.KeyGitHubAppID: []byte("42"), git.KeyGitHubAppInstallationID: []byte("7"), git.KeyGitHubAppPrivateKey: keyPEM}
	secret(t, ns, "app", corev1.SecretTypeOpaque, data)
	data[git.KeyGitHubAppAPIURL] = []byte(srv.URL + "/api/v3")
	secret(t, ns, "app-ghes", corev1.SecretTypeOpaque, data)

	createRepo(t, ns, "elsewhere", fleet.GitRepoSpec{Repo: srv.URLFor(repo), CABundle: srv.CAPEM(), ClientSecretName: "app"})
	waitPollError(t, ns, "elsewhere", "only used for github.com")
	if s := condition(getRepo(t, ns, "elsewhere"), fleet.ConditionStalled); s == nil || s.Status != metav1.ConditionTrue {
		t.Fatalf("not stalled: %+v", s)
	}
	if n := app.Issued(); n != 0 {
		t.Fatalf("the repository's host issued %d installation tokens: it got the App's JWT", n)
	}

	createRepo(t, ns, "ghes", fleet.GitRepoSpec{Repo: srv.URLFor(repo), CABundle: srv.CAPEM(), ClientSecretName: "app-ghes"})
	waitSynced(t, ns, "ghes", c1, 1)
	if n := len(bundlesOf(t, ns, "elsewhere")); n != 0 {
		t.Fatalf("elsewhere produced %d bundles", n)
	}
}
