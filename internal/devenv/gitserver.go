package devenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// repoName is the example repository's name under the git server.
const repoName = "examples.git"

// gitServer serves the bare repositories of the state folder over real
// HTTP with `git http-backend` (smart protocol, so the manager clones it
// like any remote and a user can `git push` to it).
type gitServer struct {
	root string // holds examples.git
	srv  *http.Server
	url  string
}

// ensureExampleRepo creates, on first run, a bare repository with one
// commit of the project's examples/ and a working copy whose origin is the
// HTTP URL, for the user to edit and push.
func (e *Env) ensureExampleRepo(ctx context.Context) error {
	bare := filepath.Join(e.gitRoot(), repoName)
	work := e.WorkingCopy()
	if fileExists(filepath.Join(bare, "HEAD")) && fileExists(filepath.Join(work, ".git")) {
		// A working copy made before origin/main was fetched at creation
		// has none until its first push.
		if git(ctx, "-C", work, "rev-parse", "--verify", "-q", "refs/remotes/origin/main") != nil {
			return git(ctx, "-C", work, "fetch", "-q", bare, "+refs/heads/main:refs/remotes/origin/main")
		}
		return nil
	}
	if _, err := exec.LookPath("git"); err != nil {
		return errors.New("git is needed for the example repository: install git and retry")
	}
	_ = os.RemoveAll(bare)
	_ = os.RemoveAll(work)
	if err := ensureDir(e.gitRoot()); err != nil {
		return err
	}
	src := filepath.Join(e.opts.RepoRoot, "examples")
	if err := copyTree(src, work); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	steps := [][]string{
		{"init", "--bare", "--initial-branch=main", bare},
		{"-C", bare, "config", "http.receivepack", "true"},
		{"-C", work, "init", "--initial-branch=main"},
		{"-C", work, "config", "user.name", "Fleet Quickstart"},
		{"-C", work, "config", "user.email", "quickstart@fleet.invalid"},
		{"-C", work, "add", "-A"},
		{"-C", work, "commit", "-q", "-m", "Fleet examples"},
		{"-C", work, "remote", "add", "origin", e.RepoURL()},
		// The first push goes to the path: the server is not up yet.
		{"-C", work, "push", "-q", bare, "main"},
		// Record what origin now has, from the same bare repository, so
		// that `git status` compares with origin/main from the start
		// instead of saying the upstream is gone.
		{"-C", work, "fetch", "-q", bare, "+refs/heads/main:refs/remotes/origin/main"},
		// So that a plain `git push` goes to origin over HTTP.
		{"-C", work, "config", "branch.main.remote", "origin"},
		{"-C", work, "config", "branch.main.merge", "refs/heads/main"},
	}
	for _, args := range steps {
		if err := git(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

func git(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startGitServer listens on the configured port and serves every bare
// repository in the git folder.
func (e *Env) startGitServer() error {
	backend, err := gitHTTPBackend()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", e.ports.Git)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return portError("git server", e.ports.Git, err)
	}
	h := &cgi.Handler{
		Path: backend,
		Root: "/",
		Env: []string{
			"GIT_PROJECT_ROOT=" + e.gitRoot(),
			"GIT_HTTP_EXPORT_ALL=1",
		},
	}
	e.git = &gitServer{root: e.gitRoot(), url: "http://" + addr, srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
	}}
	go func() { _ = e.git.srv.Serve(ln) }()
	return nil
}

func (g *gitServer) stop() {
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = g.srv.Shutdown(ctx)
}

// gitHTTPBackend finds git-http-backend in git's exec path.
func gitHTTPBackend() (string, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return "", fmt.Errorf("git is needed to serve the example repository: %w", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if !fileExists(p) {
		return "", fmt.Errorf("%s not found: the git installation has no HTTP backend", p)
	}
	return p, nil
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}
