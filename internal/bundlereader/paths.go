package bundlereader

// Expanding Read's paths into bundle directories. As in Rancher Fleet
// (apply.CreateBundles), a path that yields no bundle is skipped rather
// than failing the read: a glob such as apps/* matching a directory that
// only holds a README must not stall every later commit of the GitRepo.
// Only a read in which no path yields a bundle fails, since returning no
// bundle would make the caller prune every Bundle of the GitRepo.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// pathScan is what the paths of one Read expand to.
type pathScan struct {
	// dirs are the bundle directories (absolute), in path order, each once.
	dirs []string
	// firstDir is the first directory of paths[0], which Options.FleetYAML
	// defines; empty without Options.FleetYAML.
	firstDir string
	// skipped says, one entry per path or directory, why it yields no
	// bundle; Read reports them as warnings, or in its error when nothing
	// yields a bundle.
	skipped []string
}

// scanPaths expands paths (globs allowed, a leading "/" meaning the
// repository root) into bundle directories. A path outside the repository
// or an invalid glob is an error; a path that matches nothing, only files,
// or directories holding nothing to deploy is recorded in skipped.
func scanPaths(fs *fsys, paths []string, fleetYAML []byte) (*pathScan, error) {
	scan := &pathScan{}
	seen := map[string]bool{}
	for i, p := range paths {
		// As in Rancher Fleet, a leading "/" means the repository root.
		if p = strings.TrimLeft(p, "/"); p == "" {
			p = "."
		}
		if filepath.IsAbs(p) {
			return nil, fmt.Errorf("path %q: must be relative to the repository root", p)
		}
		matches, err := filepath.Glob(filepath.Join(fs.root, filepath.FromSlash(p)))
		if err != nil {
			return nil, fmt.Errorf("path %q: %w", p, err)
		}
		sort.Strings(matches)
		// With -f's fleet.yaml, the directories of paths[0] are bundles
		// even when they hold nothing else; it defines the first one.
		defined := i == 0 && fleetYAML != nil
		found, matchedDir, err := scanMatches(fs, p, matches, defined, scan)
		if err != nil {
			return nil, err
		}
		for _, d := range found {
			if !seen[d] {
				seen[d] = true
				scan.dirs = append(scan.dirs, d)
			}
		}
		if !matchedDir {
			scan.skipped = append(scan.skipped, noDirReason(p, len(matches)))
		}
	}
	return scan, nil
}

// scanMatches discovers the bundle directories of the matches of path p.
// It says whether any match is a directory; files among the matches are
// left out.
func scanMatches(fs *fsys, p string, matches []string, defined bool, scan *pathScan) ([]string, bool, error) {
	var dirs []string
	matchedDir := false
	for _, m := range matches {
		if !fs.inside(m) {
			return nil, false, fmt.Errorf("path %q is outside the repository", p)
		}
		st, err := os.Stat(m)
		if err != nil {
			return nil, false, fmt.Errorf("path %q: %w", p, err)
		}
		if !st.IsDir() {
			continue
		}
		if defined && !matchedDir {
			scan.firstDir = m
		}
		matchedDir = true
		found, err := fs.discover(m)
		if err != nil {
			return nil, false, err
		}
		if defined && (len(found) == 0 || found[0] != m) {
			found = append([]string{m}, found...)
		}
		if len(found) == 0 {
			scan.skipped = append(scan.skipped, fmt.Sprintf("path %q: no fleet.yaml and no YAML manifests found", fs.rel(m)))
		}
		dirs = append(dirs, found...)
	}
	return dirs, matchedDir, nil
}

// noDirReason says why path p, with n matches none of which is a
// directory, yields no bundle.
func noDirReason(p string, n int) string {
	switch {
	case n == 0 && hasGlobMeta(p):
		return fmt.Sprintf("path %q matches nothing", p)
	case n == 0:
		return fmt.Sprintf("path %q does not exist", p)
	case n == 1 && !hasGlobMeta(p):
		return fmt.Sprintf("path %q is a file; paths name directories", p)
	default:
		return fmt.Sprintf("path %q matches no directory (only files); paths name directories", p)
	}
}

// hasGlobMeta reports whether p holds a filepath.Match pattern character.
func hasGlobMeta(p string) bool {
	return strings.ContainsAny(p, `*?[\`)
}

// noBundleError is Read's error when no path yields a bundle: it names
// the paths and why each yielded none.
func noBundleError(paths []string, skipped []string) error {
	return fmt.Errorf("no bundle to deploy at paths %q: %s", paths, strings.Join(skipped, "; "))
}
