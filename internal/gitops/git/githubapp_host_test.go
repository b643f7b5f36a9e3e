package git_test

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// recorder is an HTTPS server that answers 404 to everything and records
// the requests it saw: a host that must never receive anything.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.seen = append(rec.seen, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization"))
		rec.mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// TestGitHubAppJWTStaysWithGitHub: App credentials whose GitRepo names
// some other host must not send that host the App's JWT (valid for every
// installation of the App at api.github.com) nor an installation token. The
// host is never contacted, and the error says why (a credentials error,
// so the GitRepo is Stalled).
func TestGitHubAppJWTStaysWithGitHub(t *testing.T) {
	ctx := context.Background()
	_, keyPEM := rsaKey(t)
	evil := newRecorder(t)
	evilCA := pemOf(evil.Certificate().Raw)
	remote := git.Remote{URL: evil.URL + "/org/repo.git", Branch: "main", CABundle: evilCA,
		Credentials: git.CredentialsFromSecret(appSecret("1234", "5678", keyPEM))}

	_, err := git.LatestCommit(ctx, remote)
	if !errors.Is(err, git.ErrBadCredentials) || !git.IsPermanent(err) || !strings.Contains(err.Error(), "github.com") {
		t.Fatalf("LatestCommit with App credentials on another host: %v", err)
	}
	if _, err := git.Fetch(ctx, remote, t.TempDir(), git.FetchOptions{}); !errors.Is(err, git.ErrBadCredentials) {
		t.Fatalf("Fetch with App credentials on another host: %v", err)
	}
	// insecureSkipTLSVerify changes nothing.
	insecure := remote
	insecure.InsecureSkipTLS = true
	if _, err := git.LatestCommit(ctx, insecure); !errors.Is(err, git.ErrBadCredentials) {
		t.Fatalf("insecure: %v", err)
	}
	if seen := evil.requests(); len(seen) != 0 {
		t.Fatalf("the repo's host received %v", seen)
	}

	// A real GitHub Enterprise Server is not trusted with the JWT either
	// until the Secret names its API: its token endpoint is never asked.
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	repo.Commit("main", map[string]string{"cm.yaml": "kind: ConfigMap\n"})
	key, keyPEM := rsaKey(t)
	app := &gittest.GitHubApp{AppID: 1234, InstallationID: 5678, PublicKey: &key.PublicKey}
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{TLS: true, GitHubApp: app})
	unconfigured := git.Remote{URL: srv.URLFor(repo), Branch: "main", CABundle: srv.CAPEM(),
		Credentials: git.CredentialsFromSecret(appSecret("1234", "5678", keyPEM))}
	if _, err := git.LatestCommit(ctx, unconfigured); !errors.Is(err, git.ErrBadCredentials) || !strings.Contains(err.Error(), git.KeyGitHubAppAPIURL) {
		t.Fatalf("GHES without %s: %v", git.KeyGitHubAppAPIURL, err)
	}
	if n := app.Issued(); n != 0 {
		t.Fatalf("the token endpoint issued %d tokens", n)
	}

	// An API URL on another host than the repository's is refused too: the
	// installation token would then go to the repository's host.
	for name, api := range map[string]string{
		"api of another host": evil.URL + "/api/v3",
		"plain http":          strings.Replace(srv.URL, "https://", "http://", 1) + "/api/v3",
	} {
		s := appSecret("1234", "5678", keyPEM)
		s.Data[git.KeyGitHubAppAPIURL] = []byte(api)
		r := unconfigured
		r.Credentials = git.CredentialsFromSecret(s)
		if _, err := git.LatestCommit(ctx, r); !errors.Is(err, git.ErrBadCredentials) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	s := appSecret("1234", "5678", keyPEM)
	s.Data[git.KeyGitHubAppAPIURL] = []byte(srv.URL + "/api/v3")
	toEvil := remote
	toEvil.Credentials = git.CredentialsFromSecret(s)
	if _, err := git.LatestCommit(ctx, toEvil); !errors.Is(err, git.ErrBadCredentials) {
		t.Fatalf("repo on another host than the configured API: %v", err)
	}
	if seen := evil.requests(); len(seen) != 0 {
		t.Fatalf("another host received %v", seen)
	}
	if n := app.Issued(); n != 0 {
		t.Fatalf("the token endpoint issued %d tokens", n)
	}
}
