package bundlereader

// Expanding Read's paths into bundle directories. Unlike Rancher Fleet
// (apply.CreateBundles), which skips any path that yields no bundle and so
// prunes its Bundles, a path that names nothing is an error here: a typo in
// a GitRepo's paths, or a directory removed from the repository but not
// from paths, must not delete what is deployed. Only a directory that a
// glob matches and that holds nothing to deploy (apps/* matching apps/docs
// with only a README, Rancher's main use of the skip) is skipped, with a
// warning; a read in which nothing yields a bundle still fails, since an
// empty result would make the caller prune every Bundle of the GitRepo.
//
// A bundle directory whose bundle has no resource (a fleet.yaml alone, or
// with only its values files) is skipped with a warning, as Rancher Fleet
// skips it (ErrNoResources), so its Bundle is pruned like that of a
// directory removed from under a path. Read checks it once the bundle is
// built; a literal path none of whose directories yields a bundle then
// fails the read, as a literal path holding nothing does (literals).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// pathScan is what the paths of one Read expand to.
type pathScan struct {
	// dirs are the bundle directories (absolute), in path order, each once.
	dirs []string
	// firstDir is the first directory of paths[0], which Options.FleetYAML
	// defines; empty without Options.FleetYAML.
	firstDir string
	// skipped says, one entry per directory a glob matched or bundle
	// without resources, why it yields no bundle; Read reports them as
	// warnings, or in its error when nothing yields a bundle.
	skipped []string
	// literals are the literal paths and the bundle directories each
	// found: each must yield a bundle (emptyLiteral).
	literals []literalPath
}

// literalPath is a path without glob and the bundle directories it found.
type literalPath struct {
	path string
	dirs []string
}

// scanPaths expands paths (globs allowed, a leading "/" meaning the
// repository root) into bundle directories. A literal path must name a
// directory holding something to deploy (recorded in literals, so that
// Read can check it yields a bundle with resources), and a glob must match
// at least one directory; anything else (a path outside the repository,
// an invalid glob, a directory that cannot be read) is an error too. Only
// directories a glob matches that hold nothing to deploy are recorded in
// skipped.
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
		// With -f's fleet.yaml, the directories of paths[0] are bundles
		// even when they hold nothing else; it defines the first one.
		defined := i == 0 && fleetYAML != nil
		var found []string
		var err error
		if hasGlobMeta(p) {
			found, err = scanGlob(fs, p, defined, scan)
		} else {
			found, err = scanLiteral(fs, p, defined, scan)
		}
		if err != nil {
			return nil, err
		}
		for _, d := range found {
			if !seen[d] {
				seen[d] = true
				scan.dirs = append(scan.dirs, d)
			}
		}
	}
	return scan, nil
}

// scanLiteral discovers the bundle directories of path p, which holds no
// glob: it must exist, be a directory and hold something to deploy.
func scanLiteral(fs *fsys, p string, defined bool, scan *pathScan) ([]string, error) {
	full := filepath.Join(fs.root, filepath.FromSlash(p))
	if !fs.inside(full) {
		return nil, fmt.Errorf("path %q is outside the repository", p)
	}
	st, err := os.Stat(full)
	switch {
	case err != nil && isNotExist(err):
		return nil, fmt.Errorf("path %q does not exist", p)
	case err != nil:
		// Permission denied, a symbolic link loop: not a missing path.
		return nil, fmt.Errorf("path %q: %w", p, pathErrCause(err))
	case !st.IsDir():
		return nil, fmt.Errorf("path %q is a file; paths name directories", p)
	}
	found, err := discoverDir(fs, full, defined, scan)
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("path %q: no fleet.yaml and no YAML manifests found", fs.rel(full))
	}
	scan.literals = append(scan.literals, literalPath{path: p, dirs: found})
	return found, nil
}

// emptyLiteral is the error of the first literal path none of whose
// directories yielded a bundle (built), nil when each yielded one. Such a
// path (say one whose manifests a commit removed, leaving its fleet.yaml)
// fails the read as a missing path does: Rancher Fleet would skip it and
// prune its Bundles, deleting what is deployed because an input went bad.
func (s *pathScan) emptyLiteral(fs *fsys, built map[string]bool) error {
	for _, l := range s.literals {
		if slices.ContainsFunc(l.dirs, func(d string) bool { return built[d] }) {
			continue
		}
		names := make([]string, 0, len(l.dirs))
		for _, d := range l.dirs {
			names = append(names, displayPath(fs.rel(d)))
		}
		return fmt.Errorf("path %q: no resources to deploy in %s (a fleet.yaml alone deploys nothing: add manifests, a Helm chart or a kustomization)",
			l.path, strings.Join(names, ", "))
	}
	return nil
}

// scanGlob discovers the bundle directories of the matches of glob p. It
// must match a directory; files among the matches are left out, and a
// matched directory holding nothing to deploy is recorded in skipped.
func scanGlob(fs *fsys, p string, defined bool, scan *pathScan) ([]string, error) {
	matches, err := glob(filepath.Join(fs.root, filepath.FromSlash(p)))
	if err != nil {
		return nil, globError(fs, p, err)
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("path %q matches nothing", p)
	}
	var dirs []string
	matchedDir := false
	for _, m := range matches {
		if !fs.inside(m) {
			return nil, fmt.Errorf("path %q is outside the repository", p)
		}
		st, err := os.Stat(m)
		switch {
		case err != nil && (isNotExist(err) || errors.Is(err, syscall.ELOOP)):
			// A dangling symbolic link or a loop: no directory, so no
			// bundle, as filepath.Glob's callers see it.
			continue
		case err != nil:
			return nil, globError(fs, p, err)
		case !st.IsDir():
			continue
		}
		matchedDir = true
		found, err := discoverDir(fs, m, defined, scan)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			scan.skipped = append(scan.skipped,
				fmt.Sprintf("path %q: directory %q holds no fleet.yaml and no YAML manifests", p, fs.rel(m)))
		}
		dirs = append(dirs, found...)
	}
	if !matchedDir {
		return nil, fmt.Errorf("path %q matches no directory (only files); paths name directories", p)
	}
	return dirs, nil
}

// discoverDir returns the bundle directories at and below dir. With -f's
// fleet.yaml (defined), dir is one even when it holds nothing else, and
// the first such dir is the one the fleet.yaml defines.
func discoverDir(fs *fsys, dir string, defined bool, scan *pathScan) ([]string, error) {
	if defined && scan.firstDir == "" {
		scan.firstDir = dir
	}
	found, err := fs.discover(dir)
	if err != nil {
		return nil, err
	}
	if defined && (len(found) == 0 || found[0] != dir) {
		found = append([]string{dir}, found...)
	}
	return found, nil
}

// pathErrCause drops the absolute path a *fs.PathError names (the
// checkout's temporary directory); the message names the path as written.
func pathErrCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// globError is glob p's error; a lookup error names the file or
// directory relative to the repository root, not the checkout's
// temporary directory.
func globError(f *fsys, p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("path %q: %s: %w", p, f.rel(pe.Path), pe.Err)
	}
	return fmt.Errorf("path %q: %w", p, err)
}

// hasGlobMeta reports whether p holds a filepath.Match pattern character.
func hasGlobMeta(p string) bool {
	return strings.ContainsAny(p, `*?[\`)
}

// noBundleError is Read's error when no path yields a bundle: it names
// the paths and why the directories their globs matched yielded none.
func noBundleError(paths []string, skipped []string) error {
	return fmt.Errorf("no bundle to deploy at paths %q: %s", paths, strings.Join(skipped, "; "))
}
