package git

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// maxSubmoduleDepth bounds nested submodules (a submodule of a submodule
// ...); repositories that include each other would otherwise never end.
const maxSubmoduleDepth = 5

// submodules checks out the submodules of a tree, as `git clone
// --recurse-submodules` would: each gitlink at the commit the tree
// records, from the URL .gitmodules gives for its path, recursively.
//
// A relative URL (./x, ../x) is resolved against the parent repository's
// URL, as git does. The parent's credentials, CA bundle and TLS setting
// are used for a submodule on the same host (and scheme) only, so that a
// .gitmodules cannot send a repository's credentials elsewhere; a
// submodule on another host is fetched anonymously. Every file counts
// against the checkout's limits.
type submodules struct {
	ctx      context.Context
	workDir  string
	budget   *budget
	maxFetch int64
	fetched  int
}

// ErrSubmodule wraps a submodule that could not be checked out.
var ErrSubmodule = errors.New("submodule")

func (s *submodules) write(parent Remote, tree *object.Tree, dst string, depth int) error {
	links, err := gitlinks(tree)
	if err != nil || len(links) == 0 {
		return err
	}
	if depth >= maxSubmoduleDepth {
		return fmt.Errorf("%w: nested more than %d deep", ErrSubmodule, maxSubmoduleDepth)
	}
	modules, err := readModules(tree)
	if err != nil {
		return err
	}
	for _, l := range links {
		m := modules[l.path]
		if m == nil || m.URL == "" {
			return fmt.Errorf("%w %s: no url for it in .gitmodules", ErrSubmodule, l.path)
		}
		remote, err := submoduleRemote(parent, m.URL)
		if err != nil {
			return fmt.Errorf("%w %s: %w", ErrSubmodule, l.path, err)
		}
		remote.Revision = l.hash
		s.fetched++
		commit, err := fetchCommit(s.ctx, remote, filepath.Join(s.workDir, "modules", fmt.Sprintf("%d.git", s.fetched)), FetchOptions{}, s.maxFetch)
		if err != nil {
			return fmt.Errorf("%w %s (%s): %w", ErrSubmodule, l.path, redact(remote.URL), err)
		}
		subTree, err := commit.Tree()
		if err != nil {
			return err
		}
		subDst := filepath.Join(dst, filepath.FromSlash(l.path))
		if err := writeTree(subTree, subDst, s.budget); err != nil {
			return fmt.Errorf("%w %s: %w", ErrSubmodule, l.path, err)
		}
		if err := s.write(remote, subTree, subDst, depth+1); err != nil {
			return err
		}
	}
	return nil
}

type gitlink struct{ path, hash string }

// gitlinks lists the submodule entries of tree (mode 160000), by path.
func gitlinks(tree *object.Tree) ([]gitlink, error) {
	var out []gitlink
	w := object.NewTreeWalker(tree, true, nil)
	defer w.Close()
	for {
		name, e, err := w.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			// A gitlink's commit is not in this repository, which the
			// walker does not try to read; anything else is a broken tree.
			return nil, err
		}
		if e.Mode != filemode.Submodule {
			continue
		}
		if err := checkName(name); err != nil {
			return nil, err
		}
		out = append(out, gitlink{path: name, hash: e.Hash.String()})
	}
}

// readModules parses .gitmodules of tree, by submodule path.
func readModules(tree *object.Tree) (map[string]*config.Submodule, error) {
	f, err := tree.File(".gitmodules")
	if err != nil {
		return nil, fmt.Errorf("%w: the repository has submodules but no readable .gitmodules: %w", ErrSubmodule, err)
	}
	text, err := f.Contents()
	if err != nil {
		return nil, err
	}
	mods := config.NewModules()
	if err := mods.Unmarshal([]byte(text)); err != nil {
		return nil, fmt.Errorf("%w: .gitmodules: %w", ErrSubmodule, err)
	}
	out := map[string]*config.Submodule{}
	for _, m := range mods.Submodules {
		out[path.Clean(m.Path)] = m
	}
	return out, nil
}

// submoduleRemote is the Remote of a submodule URL found in parent's
// .gitmodules: resolved against parent when relative, and with parent's
// credentials and TLS settings only when on the same host.
func submoduleRemote(parent Remote, raw string) (Remote, error) {
	u := raw
	if strings.HasPrefix(raw, "./") || strings.HasPrefix(raw, "../") {
		resolved, err := resolveRelative(parent.URL, raw)
		if err != nil {
			return Remote{}, err
		}
		u = resolved
	}
	out := Remote{URL: u, Timeout: parent.Timeout}
	if sameHost(parent.URL, u) {
		out.Credentials, out.CABundle, out.InsecureSkipTLS = parent.Credentials, parent.CABundle, parent.InsecureSkipTLS
	}
	return out, nil
}

// resolveRelative resolves a relative submodule URL as git does: against
// the parent repository's URL taken as a directory, so "../lib.git" next to
// "https://host/org/app.git" is "https://host/org/lib.git".
func resolveRelative(parent, rel string) (string, error) {
	if u, err := url.Parse(parent); err == nil && u.Scheme != "" && u.Host != "" {
		u.Path = path.Join(u.Path, rel)
		if !strings.HasPrefix(u.Path, "/") {
			u.Path = "/" + u.Path
		}
		return u.String(), nil
	}
	// scp-like SSH: user@host:path
	if at := strings.Index(parent, ":"); at > 0 && !strings.Contains(parent[:at], "/") {
		p := path.Join(parent[at+1:], rel)
		if p == ".." || strings.HasPrefix(p, "../") {
			return "", fmt.Errorf("relative url %q climbs above the repository host's root", rel)
		}
		return parent[:at+1] + p, nil
	}
	return "", fmt.Errorf("cannot resolve relative url %q against %s", rel, redact(parent))
}

// sameHost reports whether a and b name the same server (host and port,
// HostPort's reading, so that https://host and https://host:443 are one
// and git@host:org/x and git@host:2222:org/y are two) with the same scheme
// (scp-like SSH URLs count as ssh). A URL HostPort cannot read is on no
// host, so a submodule there is fetched without the parent's credentials.
func sameHost(a, b string) bool {
	ha, pa, errA := HostPort(a)
	hb, pb, errB := HostPort(b)
	return errA == nil && errB == nil && ha == hb && pa == pb && schemeOf(a) == schemeOf(b)
}

// schemeOf is the scheme of a URL HostPort reads: ssh for an scp-like one.
func schemeOf(raw string) string {
	if s := URLScheme(raw); s != "" {
		return s
	}
	return "ssh"
}
