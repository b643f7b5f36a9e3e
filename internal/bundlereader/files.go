package bundlereader

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// fleetYAMLNames are the file names of a bundle definition, in lookup order.
var fleetYAMLNames = []string{"fleet.yaml", "fleet.yml"}

// ErrLimit marks an input that is larger than a configured limit.
var ErrLimit = errors.New("limit exceeded")

// file is one file of a bundle directory, read from disk.
type file struct {
	name    string // relative to the bundle root, "/" separated
	content []byte
}

// fsys reads a repository tree, refusing anything that resolves outside the
// root (symlinks included) and counting bytes against the limits.
type fsys struct {
	root     string // absolute, symlinks resolved
	limits   Limits
	readSize int64
}

func newFS(root string, limits Limits) (*fsys, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("repository root: %w", err)
	}
	return &fsys{root: real, limits: limits}, nil
}

// rel returns p relative to the root with "/" separators.
func (f *fsys) rel(p string) string {
	r, err := filepath.Rel(f.root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

// resolve follows symlinks of p and checks the result is inside the root.
func (f *fsys) resolve(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	if !f.inside(real) {
		return "", fmt.Errorf("%s points outside the repository (to %s); refusing to read it", f.rel(p), real)
	}
	return real, nil
}

func (f *fsys) inside(p string) bool {
	r, err := filepath.Rel(f.root, p)
	return err == nil && r != ".." && !strings.HasPrefix(r, "../") && !filepath.IsAbs(r)
}

// readFile reads a file inside the root, bounded by the file size limit.
func (f *fsys) readFile(p string) ([]byte, error) {
	real, err := f.resolve(p)
	if err != nil {
		return nil, err
	}
	fh, err := os.Open(real)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, f.limits.MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > f.limits.MaxFileSize {
		return nil, fmt.Errorf("%s: file is larger than the limit of %d bytes: %w", f.rel(p), f.limits.MaxFileSize, ErrLimit)
	}
	f.readSize += int64(len(b))
	if f.readSize > f.limits.MaxTotalSize {
		return nil, fmt.Errorf("repository content read exceeds the limit of %d bytes: %w", f.limits.MaxTotalSize, ErrLimit)
	}
	return b, nil
}

// firstVisit resolves dir (refusing links out of the repository) and says
// whether its real directory is walked for the first time; a link loop, or
// two links to one directory, is walked once.
func (f *fsys) firstVisit(dir string, visited map[string]bool) (bool, error) {
	real, err := f.resolve(dir)
	if err != nil || visited[real] {
		return false, err
	}
	visited[real] = true
	return true, nil
}

// dirEntry is a directory entry with its symbolic link, if any, followed.
type dirEntry struct {
	name, path string
	// isDir: a directory, or a link to one.
	isDir bool
	// special: neither a directory, a regular file nor a link (a socket, a
	// device, a pipe).
	special bool
}

// readDir lists dir sorted by name, following links (only inside the
// repository) to tell directories from files.
func (f *fsys) readDir(dir string) ([]dirEntry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]dirEntry, 0, len(entries))
	for _, e := range entries {
		d := dirEntry{name: e.Name(), path: filepath.Join(dir, e.Name()), isDir: e.IsDir()}
		switch {
		case e.Type()&os.ModeSymlink != 0:
			target, err := f.resolve(d.path)
			if err != nil {
				return nil, err
			}
			st, err := os.Stat(target)
			if err != nil {
				return nil, err
			}
			d.isDir = st.IsDir()
		case !d.isDir && !e.Type().IsRegular():
			d.special = true
		}
		out = append(out, d)
	}
	return out, nil
}

// fleetYAMLPath returns the fleet.yaml of dir, or "" when it has none.
func fleetYAMLPath(dir string) string {
	for _, n := range fleetYAMLNames {
		if st, err := os.Stat(filepath.Join(dir, n)); err == nil && !st.IsDir() {
			return filepath.Join(dir, n)
		}
	}
	return ""
}

func isYAMLName(n string) bool {
	ext := strings.ToLower(path.Ext(n))
	return ext == ".yaml" || ext == ".yml"
}

// discover returns the bundle directories under base (absolute, inside the
// root), as Fleet does: every directory with a fleet.yaml, plus base itself
// when it, or a sub-directory that is not a bundle of its own, holds YAML.
// Only YAML that base's bundle would hold counts: hidden files and
// directories, what a .fleetignore excludes and special files are left out
// as loadBundleDir leaves them out, so base never becomes a bundle with
// nothing of that YAML to deploy (a repository's .github/workflows/*.yml
// or .gitlab-ci.yml is no reason for a root bundle). A fleet.yaml below an
// ignored or hidden directory still defines its own bundle, as in Rancher
// Fleet, whose walk skips only .git.
func (f *fsys) discover(base string) ([]string, error) {
	var dirs []string
	baseHasYAML := false
	visited := map[string]bool{}
	// rel is dir relative to base; owned says that dir's files would be
	// base's (not in a bundle of its own below base, not ignored); rules
	// are base's .fleetignore rules, as loadBundleDir(base) builds them.
	var walk func(dir, rel string, owned bool, rules []ignoreRule) error
	walk = func(dir, rel string, owned bool, rules []ignoreRule) error {
		if first, err := f.firstVisit(dir, visited); err != nil || !first {
			return err
		}
		isBundle := fleetYAMLPath(dir) != ""
		if isBundle {
			dirs = append(dirs, dir)
		}
		owned = owned && !(isBundle && dir != base)
		if owned {
			if data, err := os.ReadFile(filepath.Join(dir, ".fleetignore")); err == nil {
				rules = append(append([]ignoreRule(nil), rules...), parseIgnore(rel, data)...)
			}
		}
		entries, err := f.readDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			r := path.Join(rel, e.name)
			if e.special {
				continue // sockets, devices: never part of a bundle
			}
			if e.isDir {
				if e.name == ".git" {
					continue
				}
				if err := walk(e.path, r, owned && !hidden(e.name) && !ignored(rules, r, true), rules); err != nil {
					return err
				}
				continue
			}
			// YAML counts for the base only when its bundle would hold it.
			if owned && isYAMLName(e.name) && !hidden(e.name) && !ignored(rules, r, false) {
				baseHasYAML = true
			}
		}
		return nil
	}
	if err := walk(base, "", true, nil); err != nil {
		return nil, err
	}
	if (len(dirs) == 0 || dirs[0] != base) && baseHasYAML {
		dirs = append([]string{base}, dirs...)
	}
	return dirs, nil
}

// hidden reports a file or directory name starting with ".": Rancher Fleet
// leaves these out of bundle content (.git, .github, .gitlab-ci.yml, .env,
// editor files), so they are neither deployed nor shipped to clusters.
func hidden(name string) bool { return strings.HasPrefix(name, ".") }

// ignoreRule is one line of a .fleetignore file.
type ignoreRule struct {
	base    string // directory of the .fleetignore, relative to the bundle root
	re      *regexp.Regexp
	dirOnly bool
	negate  bool
	hasDir  bool // pattern names a path, not only a base name
}

func parseIgnore(base string, data []byte) []ignoreRule {
	var rules []ignoreRule
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{base: base}
		if strings.HasPrefix(line, "!") {
			r.negate = true
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") {
			r.dirOnly = true
			line = strings.TrimRight(line, "/")
		}
		if strings.Contains(line, "/") {
			r.hasDir = true
			line = strings.TrimPrefix(line, "/")
		}
		re, err := regexp.Compile("^" + globToRegexp(line) + "$")
		if err != nil {
			continue
		}
		r.re = re
		rules = append(rules, r)
	}
	return rules
}

// globToRegexp converts a gitignore-style glob ("*", "?", "**", "[..]").
func globToRegexp(g string) string {
	var b strings.Builder
	for i := 0; i < len(g); i++ {
		c := g[i]
		switch {
		case strings.HasPrefix(g[i:], "**/"):
			b.WriteString("(?:.*/)?")
			i += 2
		case strings.HasPrefix(g[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			end := strings.IndexByte(g[i:], ']')
			if end < 0 {
				b.WriteString(`\[`)
				continue
			}
			class := g[i+1 : i+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return b.String()
}

func ignored(rules []ignoreRule, rel string, isDir bool) bool {
	out := false
	for _, r := range rules {
		if r.dirOnly && !isDir {
			continue
		}
		sub := rel
		if r.base != "" {
			if !strings.HasPrefix(rel, r.base+"/") {
				continue
			}
			sub = strings.TrimPrefix(rel, r.base+"/")
		}
		target := path.Base(sub)
		if r.hasDir {
			target = sub
		}
		if r.re.MatchString(target) {
			out = !r.negate
		}
	}
	return out
}

// loadDir reads the files of the bundle directory dir: sub-directories with a
// fleet.yaml of their own, the fleet.yaml itself, hidden files and
// directories (names starting with ".", .fleetignore included) and what
// .fleetignore files exclude are left out. Names are relative to dir, sorted.
// Charts copied from the repository (a local helm.chart, file://
// dependencies, git:: sources) are read with it too, and so lose their
// hidden files (.helmignore) as in Rancher Fleet; downloaded charts are
// stored under .chart/ by the reader itself, not read through here.
func (f *fsys) loadDir(dir string) ([]file, error) {
	return f.loadBundleDir(dir, nil)
}

// loadBundleDir is loadDir for a bundle of either scan. A nil exclude is
// the classic scan: sub-directories with a fleet.yaml of their own are
// bundles of their own and stay out. A non-nil exclude is a driven-scan
// bundle, which, as in Rancher Fleet, holds every file under dir: its
// sub-directories with a fleet.yaml are read like any other. Left out are
// the files of exclude (relative to dir, "/" separated: the options files
// the scan names for dir, which define bundles instead of being part of
// them), every fleet.yaml and fleet.yml (Rancher Fleet keeps those of
// sub-directories, which fails raw-manifest bundles), and hidden and
// ignored files.
func (f *fsys) loadBundleDir(dir string, exclude map[string]bool) ([]file, error) {
	driven := exclude != nil
	var files []file
	visited := map[string]bool{}
	var walk func(abs, rel string, rules []ignoreRule) error
	walk = func(abs, rel string, rules []ignoreRule) error {
		if first, err := f.firstVisit(abs, visited); err != nil || !first {
			return err
		}
		if data, err := os.ReadFile(filepath.Join(abs, ".fleetignore")); err == nil {
			rules = append(append([]ignoreRule(nil), rules...), parseIgnore(rel, data)...)
		}
		entries, err := f.readDir(abs)
		if err != nil {
			return err
		}
		for _, e := range entries {
			r := path.Join(rel, e.name)
			if e.special {
				continue // sockets, devices
			}
			if e.isDir {
				if hidden(e.name) || ignored(rules, r, true) || (!driven && fleetYAMLPath(e.path) != "") {
					continue
				}
				if err := walk(e.path, r, rules); err != nil {
					return err
				}
				continue
			}
			// A fleet.yaml is never a resource: the bundle's own defines
			// it, and a driven bundle's sub-directory's is Fleet
			// configuration, not a Kubernetes object (the agent would
			// refuse it among raw manifests).
			if hidden(e.name) || e.name == "fleet.yaml" || e.name == "fleet.yml" || exclude[r] {
				continue
			}
			if ignored(rules, r, false) {
				continue
			}
			data, err := f.readFile(e.path)
			if err != nil {
				return err
			}
			files = append(files, file{name: r, content: data})
			if len(files) > f.limits.MaxFiles {
				return fmt.Errorf("%s: more than %d files: %w", f.rel(dir), f.limits.MaxFiles, ErrLimit)
			}
		}
		return nil
	}
	if err := walk(dir, "", nil); err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	return files, nil
}
