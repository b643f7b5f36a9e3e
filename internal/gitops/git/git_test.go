package git_test

import (
	"context"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHTTPBasicAuth(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("main", map[string]string{"app/cm.yaml": "kind: ConfigMap\n"})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "alice", Password: "s3cret"})
	ctx := context.Background()
	remote := git.Remote{URL: srv.URLFor(repo), Branch: "main", Credentials: git.Credentials{Username: "alice", Password: "s3cret"}}

	got, err := git.LatestCommit(ctx, remote)
	if err != nil || got != c1 {
		t.Fatalf("LatestCommit = %q, %v; want %q", got, err, c1)
	}
	dir := t.TempDir()
	fetched, err := git.Fetch(ctx, remote, dir, git.FetchOptions{Commit: got})
	if err != nil || fetched != c1 {
		t.Fatalf("Fetch = %q, %v", fetched, err)
	}
	if s := readFile(t, filepath.Join(dir, "source", "app", "cm.yaml")); s != "kind: ConfigMap\n" {
		t.Fatalf("content %q", s)
	}

	// A new commit is seen by the ref lookup.
	c2 := repo.Commit("main", map[string]string{"app/cm.yaml": "kind: ConfigMap\nx: 1\n"})
	if got, err := git.LatestCommit(ctx, remote); err != nil || got != c2 {
		t.Fatalf("after push LatestCommit = %q, %v; want %q", got, err, c2)
	}

	// Wrong password and missing branch are clear errors.
	bad := remote
	bad.Credentials.Password = "nope"
	if _, err := git.LatestCommit(ctx, bad); err == nil || !strings.Contains(err.Error(), "auth") {
		t.Fatalf("wrong password: %v", err)
	}
	if strings.Contains(errString(git.LatestCommit(ctx, bad)), "nope") {
		t.Fatal("password leaked into error")
	}
	missing := remote
	missing.Branch = "does-not-exist"
	if _, err := git.LatestCommit(ctx, missing); !errors.Is(err, git.ErrRefNotFound) {
		t.Fatalf("missing branch: %v", err)
	}
}

func errString(_ string, err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestHTTPSPrivateCA(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"a.yaml": "a: 1\n"})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{TLS: true})
	ctx := context.Background()

	noCA := git.Remote{URL: srv.URLFor(repo)}
	if _, err := git.LatestCommit(ctx, noCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without CA: %v", err)
	}
	withCA := git.Remote{URL: srv.URLFor(repo), CABundle: srv.CAPEM()}
	if got, err := git.LatestCommit(ctx, withCA); err != nil || got != c1 {
		t.Fatalf("with CA = %q, %v", got, err)
	}
	if _, err := git.Fetch(ctx, withCA, t.TempDir(), git.FetchOptions{}); err != nil {
		t.Fatalf("fetch with CA: %v", err)
	}
	skip := git.Remote{URL: srv.URLFor(repo), InsecureSkipTLS: true}
	if got, err := git.LatestCommit(ctx, skip); err != nil || got != c1 {
		t.Fatalf("insecure = %q, %v", got, err)
	}
}

func TestSSHKnownHosts(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"a.yaml": "a: 1\n"})
	srv := gittest.NewSSHServer(t, root)
	ctx := context.Background()
	creds := git.Credentials{SSHKey: srv.ClientKeyPEM, KnownHosts: srv.KnownHosts}
	remote := git.Remote{URL: srv.URLFor(repo), Credentials: creds, Timeout: 20 * time.Second}

	if got, err := git.LatestCommit(ctx, remote); err != nil || got != c1 {
		t.Fatalf("LatestCommit = %q, %v", got, err)
	}
	dir := t.TempDir()
	if got, err := git.Fetch(ctx, remote, dir, git.FetchOptions{}); err != nil || got != c1 {
		t.Fatalf("Fetch = %q, %v", got, err)
	}
	if s := readFile(t, filepath.Join(dir, "source", "a.yaml")); s != "a: 1\n" {
		t.Fatalf("content %q", s)
	}

	// A known_hosts entry for another key is refused.
	other := gittest.NewSSHServer(t, root)
	wrong := remote
	wrong.Credentials.KnownHosts = []byte(strings.Split(string(srv.KnownHosts), " ")[0] + " " + strings.SplitN(string(other.KnownHosts), " ", 2)[1])
	if _, err := git.LatestCommit(ctx, wrong); !errors.Is(err, git.ErrHostKey) || !git.IsPermanent(err) {
		t.Fatalf("wrong host key: %v", err)
	}
	// No known_hosts at all is refused before dialing.
	none := remote
	none.Credentials.KnownHosts = nil
	if _, err := git.LatestCommit(ctx, none); !errors.Is(err, git.ErrBadCredentials) {
		t.Fatalf("no known_hosts: %v", err)
	}
	// A key the server does not know is refused.
	otherKey, _ := gittest.NewKeyPEM(t)
	badKey := remote
	badKey.Credentials.SSHKey = otherKey
	if _, err := git.LatestCommit(ctx, badKey); err == nil {
		t.Fatal("unknown client key accepted")
	}
}

func TestRevisionTagAndCommit(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"v.yaml": "v: 1\n"})
	repo.Tag("v1")
	repo.Commit("master", map[string]string{"v.yaml": "v: 2\n"})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	ctx := context.Background()

	tag := git.Remote{URL: srv.URLFor(repo), Revision: "v1"}
	if got, err := git.LatestCommit(ctx, tag); err != nil || got != c1 {
		t.Fatalf("tag LatestCommit = %q, %v; want %q", got, err, c1)
	}
	dir := t.TempDir()
	if got, err := git.Fetch(ctx, tag, dir, git.FetchOptions{}); err != nil || got != c1 {
		t.Fatalf("tag Fetch = %q, %v", got, err)
	}
	if s := readFile(t, filepath.Join(dir, "source", "v.yaml")); s != "v: 1\n" {
		t.Fatalf("tag content %q", s)
	}
	byCommit := git.Remote{URL: srv.URLFor(repo), Revision: c1}
	dir = t.TempDir()
	if got, err := git.Fetch(ctx, byCommit, dir, git.FetchOptions{}); err != nil || got != c1 {
		t.Fatalf("commit Fetch = %q, %v", got, err)
	}
	if s := readFile(t, filepath.Join(dir, "source", "v.yaml")); s != "v: 1\n" {
		t.Fatalf("commit content %q", s)
	}
}

// TestFetchResolvedRefListsRefsOnce: a GitRepo polls with LatestRef and
// fetches what it resolved; for a revision naming a tag, a branch or HEAD
// the fetch must not list the remote's refs a second time.
func TestFetchResolvedRefListsRefsOnce(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"v.yaml": "v: 1\n"})
	repo.Tag("v1")
	c2 := repo.Commit("master", map[string]string{"v.yaml": "v: 2\n"})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	ctx := context.Background()

	for _, tc := range []struct{ revision, want, content string }{
		{"v1", c1, "v: 1\n"},
		{"master", c2, "v: 2\n"},
		{"HEAD", c2, "v: 2\n"},
	} {
		remote := git.Remote{URL: srv.URLFor(repo), Revision: tc.revision}
		before := len(srv.RefTimes())
		ref, err := git.LatestRef(ctx, remote)
		if err != nil || ref.Commit != tc.want || ref.Name == "" {
			t.Fatalf("%s: LatestRef = %+v, %v; want commit %s", tc.revision, ref, err, tc.want)
		}
		dir := t.TempDir()
		got, err := git.Fetch(ctx, remote, dir, git.FetchOptions{Commit: ref.Commit, Ref: ref.Name})
		if err != nil || got != tc.want {
			t.Fatalf("%s: Fetch = %q, %v; want %s", tc.revision, got, err, tc.want)
		}
		if s := readFile(t, filepath.Join(dir, "source", "v.yaml")); s != tc.content {
			t.Fatalf("%s: content %q, want %q", tc.revision, s, tc.content)
		}
		// One advertisement for the poll, one for the fetch itself.
		if n := len(srv.RefTimes()) - before; n != 2 {
			t.Fatalf("%s: %d ref advertisements for a poll and a fetch, want 2", tc.revision, n)
		}
	}
}

// TestFetchSizeLimit: a fetch that stores more than MaxFetchBytes fails
// with ErrTooLarge (a permanent error, with the limit in its message) and
// the same repository fetches under the default limit.
func TestFetchSizeLimit(t *testing.T) {
	root := t.TempDir()
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	ctx := context.Background()
	noise := make([]byte, 300<<10)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(noise)
	big := gittest.NewRepo(t, root, "noise")
	big.Commit("master", map[string]string{"blob.txt": base64.StdEncoding.EncodeToString(noise)})

	_, err := git.Fetch(ctx, git.Remote{URL: srv.URLFor(big)}, t.TempDir(), git.FetchOptions{Limits: git.Limits{MaxFetchBytes: 100 << 10}})
	if !errors.Is(err, git.ErrTooLarge) || !git.IsPermanent(err) || !strings.Contains(err.Error(), "102400 bytes") {
		t.Fatalf("fetch over the limit: %v", err)
	}
	dir := t.TempDir()
	if _, err := git.Fetch(ctx, git.Remote{URL: srv.URLFor(big)}, dir, git.FetchOptions{}); err != nil {
		t.Fatalf("fetch under the default limit: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "source", "blob.txt")); err != nil || fi.Size() < 300<<10 {
		t.Fatalf("checked-out file: %v, %v", fi, err)
	}
}

func TestCheckoutLimitsAndSymlinks(t *testing.T) {
	root := t.TempDir()
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	ctx := context.Background()

	big := gittest.NewRepo(t, root, "big")
	big.Commit("master", map[string]string{"a": strings.Repeat("x", 4096), "b": strings.Repeat("y", 4096)})
	_, err := git.Fetch(ctx, git.Remote{URL: srv.URLFor(big)}, t.TempDir(), git.FetchOptions{Limits: git.Limits{MaxBytes: 6000}})
	if !errors.Is(err, git.ErrTooLarge) {
		t.Fatalf("size limit: %v", err)
	}
	_, err = git.Fetch(ctx, git.Remote{URL: srv.URLFor(big)}, t.TempDir(), git.FetchOptions{Limits: git.Limits{MaxFiles: 1}})
	if !errors.Is(err, git.ErrTooLarge) {
		t.Fatalf("file limit: %v", err)
	}

	inside := gittest.NewRepo(t, root, "inside")
	inside.Write(map[string]string{"base/x.yaml": "x: 1\n"})
	inside.Symlink("app/x.yaml", "../base/x.yaml")
	inside.Commit("master", nil)
	dir := t.TempDir()
	if _, err := git.Fetch(ctx, git.Remote{URL: srv.URLFor(inside)}, dir, git.FetchOptions{}); err != nil {
		t.Fatalf("inside symlink: %v", err)
	}
	if s := readFile(t, filepath.Join(dir, "source", "app", "x.yaml")); s != "x: 1\n" {
		t.Fatalf("through link %q", s)
	}

	for name, target := range map[string]string{"escape": "../../../etc/passwd", "absolute": "/etc/passwd"} {
		r := gittest.NewRepo(t, root, name)
		r.Symlink("app/secret", target)
		r.Commit("master", map[string]string{"ok.yaml": "a: 1\n"})
		_, err := git.Fetch(ctx, git.Remote{URL: srv.URLFor(r)}, t.TempDir(), git.FetchOptions{})
		if !errors.Is(err, git.ErrUnsafePath) {
			t.Fatalf("%s symlink: %v", name, err)
		}
	}
}

func TestHungServerTimesOut(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	repo.Commit("master", map[string]string{"a": "a"})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	srv.Hang.Store(true)
	_, err := git.LatestCommit(context.Background(), git.Remote{URL: srv.URLFor(repo), Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("hung server: %v", err)
	}
}

func TestCredentialsInURLAreRedacted(t *testing.T) {
	root := t.TempDir()
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	url := strings.Replace(srv.URL, "http://", "http://bob:hunter2@", 1) + "/missing.git"
	_, err := git.LatestCommit(context.Background(), git.Remote{URL: url})
	if err == nil {
		t.Fatal("missing repo gave no error")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("password in error: %v", err)
	}
	_, err = git.Fetch(context.Background(), git.Remote{URL: url}, t.TempDir(), git.FetchOptions{})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("fetch error %v", err)
	}
}

// TestTokenInURLIsRedacted: a token given as the URL's user name alone
// (https://ghp_x@host/...) is masked in every message, the ref-not-found
// ones (which format the URL themselves) included.
func TestTokenInURLIsRedacted(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	repo.Commit("master", map[string]string{"a.yaml": "a: 1\n"})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	ctx := context.Background()
	url := strings.Replace(srv.URLFor(repo), "http://", "http://ghp_secret@", 1)

	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		if strings.Contains(err.Error(), "ghp_secret") || !strings.Contains(err.Error(), "http://***@") {
			t.Fatalf("%s: token not masked: %v", what, err)
		}
	}
	_, err := git.LatestCommit(ctx, git.Remote{URL: url, Branch: "missing"})
	if !errors.Is(err, git.ErrRefNotFound) {
		t.Fatalf("missing branch: %v", err)
	}
	check("LatestCommit missing branch", err)
	_, err = git.LatestCommit(ctx, git.Remote{URL: url, Revision: "missing"})
	check("LatestCommit missing revision", err)
	_, err = git.Fetch(ctx, git.Remote{URL: url, Revision: "missing"}, t.TempDir(), git.FetchOptions{})
	check("Fetch missing revision", err)
	_, err = git.Fetch(ctx, git.Remote{URL: strings.TrimSuffix(url, "app.git") + "gone.git"}, t.TempDir(), git.FetchOptions{})
	if err == nil || strings.Contains(err.Error(), "ghp_secret") {
		t.Fatalf("Fetch missing repo: %v", err)
	}
}

// TestRevisionBranchAndHEAD: a revision that names a branch, or HEAD (the
// remote's default branch), is fetched at the commit LatestCommit resolves;
// a tag of the same name as a branch wins, as in LatestCommit; an unknown
// revision is ErrRefNotFound.
func TestRevisionBranchAndHEAD(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	cTag := repo.Commit("master", map[string]string{"v.yaml": "v: tag\n"})
	repo.Tag("both")
	cStable := repo.Commit("stable", map[string]string{"v.yaml": "v: stable\n"})
	cFeature := repo.Commit("feature", map[string]string{"v.yaml": "v: feature\n"})
	repo.Commit("both", map[string]string{"v.yaml": "v: branch both\n"})
	repo.Commit("master", map[string]string{"v.yaml": "v: master\n"})
	// The served repository's default branch is stable, not master.
	if out, err := exec.Command("git", "--git-dir", repo.Dir(), "symbolic-ref", "HEAD", "refs/heads/stable").CombinedOutput(); err != nil {
		t.Fatalf("symbolic-ref: %v: %s", err, out)
	}
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	ctx := context.Background()

	for _, tc := range []struct{ revision, commit, content string }{
		{"feature", cFeature, "v: feature\n"},
		{"HEAD", cStable, "v: stable\n"},
		{"both", cTag, "v: tag\n"},
	} {
		remote := git.Remote{URL: srv.URLFor(repo), Revision: tc.revision}
		got, err := git.LatestCommit(ctx, remote)
		if err != nil || got != tc.commit {
			t.Fatalf("%s: LatestCommit = %q, %v; want %q", tc.revision, got, err, tc.commit)
		}
		dir := t.TempDir()
		fetched, err := git.Fetch(ctx, remote, dir, git.FetchOptions{Commit: got})
		if err != nil || fetched != tc.commit {
			t.Fatalf("%s: Fetch = %q, %v; want %q", tc.revision, fetched, err, tc.commit)
		}
		if s := readFile(t, filepath.Join(dir, "source", "v.yaml")); s != tc.content {
			t.Fatalf("%s: content %q; want %q", tc.revision, s, tc.content)
		}
	}
	_, err := git.Fetch(ctx, git.Remote{URL: srv.URLFor(repo), Revision: "nope"}, t.TempDir(), git.FetchOptions{})
	if !errors.Is(err, git.ErrRefNotFound) || !git.IsPermanent(err) {
		t.Fatalf("unknown revision: %v", err)
	}
}
