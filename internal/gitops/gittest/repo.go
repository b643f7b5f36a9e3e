// Package gittest runs real git servers in-process for tests: smart HTTP(S)
// through `git http-backend` behind net/http/cgi, and SSH through
// gliderlabs/ssh running `git-upload-pack`. Repositories are made with the git
// binary, as a user would.
package gittest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Repo is a bare repository served by the servers plus a work tree used to
// make commits.
type Repo struct {
	// Root holds every bare repo served; Name is this repo's directory in it.
	Root string
	Name string
	work string
	t    testing.TB
}

// NewRepo creates Root/name.git (bare) with branch "master" and no commits.
func NewRepo(t testing.TB, root, name string) *Repo {
	t.Helper()
	r := &Repo{Root: root, Name: name + ".git", work: filepath.Join(t.TempDir(), name), t: t}
	r.git(root, "init", "--bare", "-b", "master", r.Name)
	r.git(filepath.Join(root, r.Name), "config", "http.receivepack", "false")
	r.git(filepath.Join(root, r.Name), "config", "uploadpack.allowReachableSHA1InWant", "true")
	r.git("", "init", "-b", "master", r.work)
	r.git(r.work, "remote", "add", "origin", filepath.Join(root, r.Name))
	return r
}

// Dir is the bare repository path.
func (r *Repo) Dir() string { return filepath.Join(r.Root, r.Name) }

func (r *Repo) git(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.Root)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Write sets files (path → content) in the work tree; an empty content
// removes the file. Nothing is committed.
func (r *Repo) Write(files map[string]string) {
	r.t.Helper()
	for name, content := range files {
		p := filepath.Join(r.work, filepath.FromSlash(name))
		if content == "" {
			if err := os.RemoveAll(p); err != nil {
				r.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
}

// Symlink creates a symlink in the work tree.
func (r *Repo) Symlink(name, target string) {
	r.t.Helper()
	p := filepath.Join(r.work, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		r.t.Fatal(err)
	}
}

// RemovePath deletes a file or directory from the work tree.
func (r *Repo) RemovePath(name string) {
	r.t.Helper()
	if err := os.RemoveAll(filepath.Join(r.work, filepath.FromSlash(name))); err != nil {
		r.t.Fatal(err)
	}
}

// Commit writes files, commits everything and pushes to branch. It returns
// the new commit SHA.
func (r *Repo) Commit(branch string, files map[string]string) string {
	r.t.Helper()
	r.Write(files)
	r.git(r.work, "add", "-A")
	r.git(r.work, "commit", "--allow-empty", "-q", "-m", fmt.Sprintf("change %d files", len(files)))
	r.git(r.work, "push", "-q", "-f", "origin", "HEAD:refs/heads/"+branch)
	return r.git(r.work, "rev-parse", "HEAD")
}

// AddSubmodule adds sub (at the head of its master branch) as a submodule
// at path of the work tree, recorded in .gitmodules with url (such as
// "../lib.git" or a server URL). Nothing is committed.
func (r *Repo) AddSubmodule(path, url string, sub *Repo) {
	r.t.Helper()
	r.git(r.work, "-c", "protocol.file.allow=always", "submodule", "add", "-q", "-b", "master", sub.Dir(), path)
	r.git(r.work, "config", "-f", ".gitmodules", "submodule."+path+".url", url)
	r.git(r.work, "add", ".gitmodules")
}

// UpdateSubmodule moves the submodule at path to the head of its master
// branch. Nothing is committed.
func (r *Repo) UpdateSubmodule(path string) {
	r.t.Helper()
	r.git(filepath.Join(r.work, filepath.FromSlash(path)), "-c", "protocol.file.allow=always", "pull", "-q", "origin", "master")
	r.git(r.work, "add", path)
}

// Tag creates an annotated tag at HEAD and pushes it.
func (r *Repo) Tag(name string) string {
	r.t.Helper()
	r.git(r.work, "tag", "-a", "-m", name, name)
	r.git(r.work, "push", "-q", "origin", "refs/tags/"+name)
	return r.git(r.work, "rev-parse", "HEAD")
}
