package bundlereader

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// ReadDriven builds one Bundle per entry of bundles, Fleet's "driven scan"
// (GitRepo spec.bundles, `fleet apply --driven-scan`). Nothing is discovered:
// each Base directory, relative to root, is one bundle as it stands, defined
// by its Options file (relative to Base, and allowed to lie outside it as
// long as it stays in the repository; the directory's fleet.yaml, if any,
// when empty). As in Rancher Fleet the bundle holds every file under Base,
// sub-directories with a fleet.yaml of their own included (but no
// fleet.yaml itself, which Rancher ships): fleet.yaml files, hidden and
// .fleetignore'd files, values files and the options files the list names
// for Base are left out. A Base inside another listed Base is warned
// about: its files are then part of both bundles. Leaving out the options files of the other
// entries of the same Base is a deliberate difference: Rancher Fleet keeps
// them as resources and tells users to .fleetignore them. A bundle is named
// NAME-<base>, plus -<options file without extension> when one is given
// (the joined path cleaned, as Rancher Fleet's filepath.Join does), so one
// directory can be deployed several times with different options (an
// overlay per environment, say); a name in the options file wins.
//
// An entry whose bundle has no resource is skipped with a warning, as in
// Rancher Fleet: its previous Bundle is then pruned by the caller. Unlike
// a literal path without resources (Read), this is kept: Rancher Fleet
// (0.14, CreateBundlesDriven) skips such an entry and prunes its Bundle
// while deploying the others, so failing here would stop repositories that
// work there. Any other error fails the whole read, so a caller never
// applies a partial set (which would prune the rest), and so does a list
// none of whose entries has a resource.
func ReadDriven(ctx context.Context, name, root string, bundles []fleet.BundlePath, opts Options) ([]*fleet.Bundle, error) {
	if len(bundles) == 0 {
		return nil, fmt.Errorf("driven scan: no bundles listed")
	}
	opts.Limits = opts.Limits.withDefaults()
	fs, err := newFS(root, opts.Limits)
	if err != nil {
		return nil, err
	}
	type entry struct{ dir, options string }
	entries := make([]entry, 0, len(bundles))
	// optionsOf maps a directory to the options files the list names for
	// it. Every listed directory has a map, empty or not: a non-nil exclude
	// is what makes loadBundleDir read a driven bundle whole.
	optionsOf := map[string]map[string]bool{}
	for _, bp := range bundles {
		dir, options, err := drivenPaths(fs, bp)
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{dir: dir, options: options})
		if optionsOf[dir] == nil {
			optionsOf[dir] = map[string]bool{}
		}
		if options != "" {
			optionsOf[dir][options] = true
		}
	}
	nested := nestedDirs(optionsOf)
	warned := map[[2]string]bool{}
	out := make([]*fleet.Bundle, 0, len(bundles))
	byName := map[string]string{}
	var empty []string
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dir, options := e.dir, e.options
		label := displayPath(fs.rel(dir))
		if options != "" {
			label += " with " + options
		}
		b, err := readBundle(ctx, bundleInput{name: name, fs: fs, dir: dir, options: options, exclude: optionsOf[dir], opts: &opts})
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", label, err)
		}
		if len(b.Spec.Resources) == 0 {
			empty = append(empty, label)
			if opts.Warn != nil {
				opts.Warn(fmt.Sprintf("bundle %s: no resources to deploy; skipped", label))
			}
			continue
		}
		if other, dup := byName[b.Name]; dup {
			return nil, fmt.Errorf("bundles %s and %s are both named %q; set a distinct name in their options", other, label, b.Name)
		}
		byName[b.Name] = label
		out = append(out, b)
		for _, inner := range nested[dir] {
			if k := [2]string{dir, inner}; !warned[k] && holdsFilesUnder(b, dir, inner) && opts.Warn != nil {
				warned[k] = true
				opts.Warn(fmt.Sprintf("bundle %s holds %s, listed as a bundle of its own: its files are part of both (.fleetignore it in %s to keep them apart)",
					displayPath(fs.rel(dir)), displayPath(fs.rel(inner)), displayPath(fs.rel(dir))))
			}
		}
	}
	if len(out) == 0 {
		// Returning no bundle would make the caller prune every Bundle of
		// the repository.
		return nil, fmt.Errorf("driven scan: no resources to deploy in any listed bundle (%s)", strings.Join(empty, ", "))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// drivenPaths checks one driven-scan entry and returns its directory
// (absolute, inside the root) and its options file (relative to that
// directory, "/" separated, cleaned; empty for the default fleet.yaml).
// The options file may leave the directory ("../shared/dev.yaml"), as
// Rancher Fleet joins the two without a check, but not the repository.
func drivenPaths(fs *fsys, bp fleet.BundlePath) (dir, options string, err error) {
	base := bp.Base
	if base == "" {
		base = "."
	}
	if filepath.IsAbs(base) || path.IsAbs(base) {
		return "", "", fmt.Errorf("bundle base %q: must be relative to the repository root", bp.Base)
	}
	dir = filepath.Join(fs.root, filepath.FromSlash(base))
	if !fs.inside(dir) {
		return "", "", fmt.Errorf("bundle base %q is outside the repository", bp.Base)
	}
	st, err := os.Stat(dir)
	switch {
	case os.IsNotExist(err):
		return "", "", fmt.Errorf("bundle base %q does not exist", bp.Base)
	case err != nil:
		return "", "", fmt.Errorf("bundle base %q: %w", bp.Base, err)
	case !st.IsDir():
		return "", "", fmt.Errorf("bundle base %q is not a directory", bp.Base)
	}
	if bp.Options == "" {
		return dir, "", nil
	}
	options = path.Clean(filepath.ToSlash(bp.Options))
	if path.IsAbs(options) || filepath.IsAbs(bp.Options) {
		return "", "", fmt.Errorf("bundle %q: options file %q must be relative to the bundle directory", bp.Base, bp.Options)
	}
	file := filepath.Join(dir, filepath.FromSlash(options))
	if !fs.inside(file) {
		return "", "", fmt.Errorf("bundle %q: options file %q is outside the repository", bp.Base, bp.Options)
	}
	// A missing file is reported when the bundle is read; a directory
	// would only fail there with a less helpful read error.
	if st, err := os.Stat(file); err == nil && st.IsDir() {
		return "", "", fmt.Errorf("bundle %q: options file %q is a directory", bp.Base, bp.Options)
	}
	return dir, options, nil
}

// nestedDirs maps each listed directory to the listed directories inside
// it. A driven bundle holds every file under its base, so an inner
// directory's files are deployed by both bundles unless the outer one
// ignores them (before this project followed Rancher Fleet there, such a
// directory with a fleet.yaml of its own stayed out of the outer bundle):
// ReadDriven warns when the outer bundle holds some.
func nestedDirs(dirs map[string]map[string]bool) map[string][]string {
	out := map[string][]string{}
	for outer := range dirs {
		for inner := range dirs {
			if inner != outer && strings.HasPrefix(inner, outer+string(filepath.Separator)) {
				out[outer] = append(out[outer], inner)
			}
		}
		sort.Strings(out[outer])
	}
	return out
}

// holdsFilesUnder says whether b, read from dir, has a resource under inner.
func holdsFilesUnder(b *fleet.Bundle, dir, inner string) bool {
	rel, err := filepath.Rel(dir, inner)
	if err != nil {
		return false
	}
	prefix := filepath.ToSlash(rel) + "/"
	for _, r := range b.Spec.Resources {
		if strings.HasPrefix(r.Name, prefix) {
			return true
		}
	}
	return false
}
