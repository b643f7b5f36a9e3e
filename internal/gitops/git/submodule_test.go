package git_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

func TestSubmodulesAreCheckedOutAtTheirRecordedCommits(t *testing.T) {
	root := t.TempDir()
	nested := gittest.NewRepo(t, root, "nested")
	nested.Commit("master", map[string]string{"n.yaml": "nested: 1\n"})
	lib := gittest.NewRepo(t, root, "lib")
	lib.AddSubmodule("deps/nested", "../nested.git", nested)
	lib.Commit("master", map[string]string{"chart/cm.yaml": "version: 1\n"})
	app := gittest.NewRepo(t, root, "app")
	app.AddSubmodule("vendor/lib", "../lib.git", lib)
	c1 := app.Commit("main", map[string]string{"app.yaml": "app: 1\n"})

	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "alice", Password: "s3cret"})
	ctx := context.Background()
	remote := git.Remote{URL: srv.URLFor(app), Branch: "main", Credentials: git.Credentials{Username: "alice", Password: "s3cret"}}

	dir := t.TempDir()
	got, err := git.Fetch(ctx, remote, dir, git.FetchOptions{})
	if err != nil || got != c1 {
		t.Fatalf("Fetch = %q, %v; want %q", got, err, c1)
	}
	src := filepath.Join(dir, "source")
	for p, want := range map[string]string{
		"app.yaml":                      "app: 1\n",
		"vendor/lib/chart/cm.yaml":      "version: 1\n",
		"vendor/lib/deps/nested/n.yaml": "nested: 1\n",
	} {
		if s := readFile(t, filepath.Join(src, filepath.FromSlash(p))); s != want {
			t.Errorf("%s = %q, want %q", p, s, want)
		}
	}

	// The library moves on; the app checks it out only once it records
	// the new commit.
	lib.Commit("master", map[string]string{"chart/cm.yaml": "version: 2\n"})
	dir = t.TempDir()
	if _, err := git.Fetch(ctx, remote, dir, git.FetchOptions{}); err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, filepath.Join(dir, "source", "vendor", "lib", "chart", "cm.yaml")); s != "version: 1\n" {
		t.Fatalf("before the app records it: %q", s)
	}
	app.UpdateSubmodule("vendor/lib")
	c2 := app.Commit("main", nil)
	dir = t.TempDir()
	if got, err := git.Fetch(ctx, remote, dir, git.FetchOptions{}); err != nil || got != c2 {
		t.Fatalf("Fetch = %q, %v; want %q", got, err, c2)
	}
	if s := readFile(t, filepath.Join(dir, "source", "vendor", "lib", "chart", "cm.yaml")); s != "version: 2\n" {
		t.Fatalf("after the app records it: %q", s)
	}

	// Files of submodules count against the checkout's limits.
	_, err = git.Fetch(ctx, remote, t.TempDir(), git.FetchOptions{Limits: git.Limits{MaxFiles: 3}})
	if !errors.Is(err, git.ErrTooLarge) {
		t.Fatalf("limits with submodules: %v", err)
	}
}

func TestSubmoduleOnAnotherHostGetsNoCredentials(t *testing.T) {
	root := t.TempDir()
	lib := gittest.NewRepo(t, root, "lib")
	lib.Commit("master", map[string]string{"cm.yaml": "x: 1\n"})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "alice", Password: "s3cret"})
	// The same server under another name is another host: the app's
	// credentials must not be sent there.
	elsewhere := strings.Replace(srv.URLFor(lib), "127.0.0.1", "localhost", 1)
	if elsewhere == srv.URLFor(lib) {
		t.Fatalf("server URL %s is not on 127.0.0.1", srv.URL)
	}
	app := gittest.NewRepo(t, root, "app")
	app.AddSubmodule("vendor/lib", elsewhere, lib)
	app.Commit("main", map[string]string{"app.yaml": "app: 1\n"})

	remote := git.Remote{URL: srv.URLFor(app), Branch: "main", Credentials: git.Credentials{Username: "alice", Password: "s3cret"}}
	_, err := git.Fetch(context.Background(), remote, t.TempDir(), git.FetchOptions{})
	if !errors.Is(err, git.ErrSubmodule) || !strings.Contains(err.Error(), "vendor/lib") || !strings.Contains(err.Error(), "auth") {
		t.Fatalf("submodule on another host: %v", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatal("password leaked into the error")
	}
}
