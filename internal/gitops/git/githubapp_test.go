package git_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

func rsaKey(t *testing.T) (*rsa.PrivateKey, []byte) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

func appSecret(id, installation string, key []byte) *corev1.Secret {
	return &corev1.Secret{Data: map[string][]byte{
		git.KeyGitHubAppID: []byte(id), git.KeyGitHubAppInstallationID: []byte(installation), git.KeyGitHubAppPrivateKey: key,
	}}
}

func TestGitHubAppInstallationToken(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("main", map[string]string{"cm.yaml": "kind: ConfigMap\n"})
	key, keyPEM := rsaKey(t)
	app := &gittest.GitHubApp{AppID: 1234, InstallationID: 5678, PublicKey: &key.PublicKey}
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{TLS: true, GitHubApp: app})
	ctx := context.Background()
	// The test server is a GitHub Enterprise Server: its API is named in
	// the Secret, as it must be for any host but github.com.
	ghes := func(s *corev1.Secret) *corev1.Secret {
		s.Data[git.KeyGitHubAppAPIURL] = []byte(srv.URL + "/api/v3")
		return s
	}
	remote := git.Remote{URL: srv.URLFor(repo), Branch: "main", CABundle: srv.CAPEM(),
		Credentials: git.CredentialsFromSecret(ghes(appSecret("1234", "5678", keyPEM)))}

	// Without credentials the server refuses: the App's token is what
	// gets the commit.
	anonymous := remote
	anonymous.Credentials = git.Credentials{}
	if _, err := git.LatestCommit(ctx, anonymous); err == nil {
		t.Fatal("anonymous access was allowed")
	}
	got, err := git.LatestCommit(ctx, remote)
	if err != nil || got != c1 {
		t.Fatalf("LatestCommit = %q, %v; want %q", got, err, c1)
	}
	dir := t.TempDir()
	if _, err := git.Fetch(ctx, remote, dir, git.FetchOptions{}); err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, filepath.Join(dir, "source", "cm.yaml")); s != "kind: ConfigMap\n" {
		t.Fatalf("content %q", s)
	}
	// One token served both calls: it is cached until shortly before it
	// expires.
	if n := app.Issued(); n != 1 {
		t.Fatalf("issued %d installation tokens, want 1", n)
	}

	// A key that is not the App's: the API refuses the JWT, and the error
	// says so without showing the key.
	_, otherPEM := rsaKey(t)
	wrong := remote
	wrong.Credentials = git.CredentialsFromSecret(ghes(appSecret("1234", "5678", otherPEM)))
	_, err = git.LatestCommit(ctx, wrong)
	if !errors.Is(err, git.ErrBadCredentials) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong key: %v", err)
	}
	if strings.Contains(err.Error(), "PRIVATE KEY") {
		t.Fatal("the private key leaked into the error")
	}
	// Another installation does not exist for this App.
	other := remote
	other.Credentials = git.CredentialsFromSecret(ghes(appSecret("1234", "9999", keyPEM)))
	if _, err := git.LatestCommit(ctx, other); !errors.Is(err, git.ErrBadCredentials) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("unknown installation: %v", err)
	}
}

func TestGitHubAppSecretErrors(t *testing.T) {
	_, keyPEM := rsaKey(t)
	for name, s := range map[string]*corev1.Secret{
		"missing installation": appSecret("1", "", keyPEM),
		"app id not a number":  appSecret("one", "2", keyPEM),
		"key not PEM":          appSecret("1", "2", []byte("not a key")),
	} {
		t.Run(name, func(t *testing.T) {
			r := git.Remote{URL: "https://github.example.invalid/org/repo.git", Credentials: git.CredentialsFromSecret(s)}
			_, err := git.LatestCommit(context.Background(), r)
			if !errors.Is(err, git.ErrBadCredentials) {
				t.Fatalf("want ErrBadCredentials, got %v", err)
			}
		})
	}
}
