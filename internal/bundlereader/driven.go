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
// by its Options file (relative to Base; the directory's fleet.yaml, if any,
// when empty). No options file the list names for a directory is a resource
// of that directory's bundles. A bundle is
// named NAME-<base>, plus -<options file without extension> when one is
// given, so one directory can be deployed several times with different
// options (an overlay per environment, say); a name in the options file wins.
//
// As with Read, any error fails the whole read, so a caller never applies a
// partial set (which would prune the rest); a directory that yields no
// resource is an error rather than a bundle silently dropped.
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
	optionsOf := map[string]map[string]bool{} // dir → its options files
	for _, bp := range bundles {
		dir, options, err := drivenPaths(fs, bp)
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{dir: dir, options: options})
		if options != "" {
			if optionsOf[dir] == nil {
				optionsOf[dir] = map[string]bool{}
			}
			optionsOf[dir][options] = true
		}
	}
	out := make([]*fleet.Bundle, 0, len(bundles))
	byName := map[string]string{}
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
			return nil, fmt.Errorf("bundle %s: no resources to deploy", label)
		}
		if other, dup := byName[b.Name]; dup {
			return nil, fmt.Errorf("bundles %s and %s are both named %q; set a distinct name in their options", other, label, b.Name)
		}
		byName[b.Name] = label
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// drivenPaths checks one driven-scan entry and returns its directory
// (absolute, inside the root) and its options file (relative to that
// directory, "/" separated, cleaned; empty for the default fleet.yaml).
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
	if path.IsAbs(options) || options == ".." || strings.HasPrefix(options, "../") || options == "." {
		return "", "", fmt.Errorf("bundle %q: options file %q must be a file inside the bundle directory", bp.Base, bp.Options)
	}
	return dir, options, nil
}
