package bundlereader

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// glob expands pattern as filepath.Glob does, but reports the errors
// filepath.Glob ignores: a directory it cannot read (permission denied,
// too many open files) or stat (a symbolic link loop) would otherwise read
// as one holding no match, and a GitRepo would prune the bundles below it.
// Only a name that does not exist (or lies below a file) is no match.
func glob(pattern string) ([]string, error) {
	if _, err := filepath.Match(pattern, ""); err != nil {
		return nil, err
	}
	if !hasGlobMeta(pattern) {
		if _, err := os.Lstat(pattern); err != nil {
			if isNotExist(err) {
				return nil, nil
			}
			return nil, err
		}
		return []string{pattern}, nil
	}
	dir, file := filepath.Split(pattern)
	dir = cleanGlobDir(dir)
	if !hasGlobMeta(dir) {
		return globDir(dir, file, nil)
	}
	if dir == pattern {
		return nil, filepath.ErrBadPattern
	}
	dirs, err := glob(dir)
	if err != nil {
		return nil, err
	}
	var matches []string
	for _, d := range dirs {
		if matches, err = globDir(d, file, matches); err != nil {
			return nil, err
		}
	}
	return matches, nil
}

// globDir appends to matches the names in dir that match pattern, sorted.
// A dir that does not exist, is a file, or is a symbolic link that leads
// nowhere (dangling, or a loop: it can hide no bundle) holds no match; any
// other error reading it is returned.
func globDir(dir, pattern string, matches []string) ([]string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		if isNotExist(err) || errors.Is(err, syscall.ELOOP) {
			return matches, nil
		}
		return nil, err
	}
	if !st.IsDir() {
		return matches, nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, n := range names {
		if ok, _ := filepath.Match(pattern, n); ok {
			matches = append(matches, filepath.Join(dir, n))
		}
	}
	return matches, nil
}

// cleanGlobDir is filepath.Split's directory without its trailing
// separator, as filepath.Glob cleans it.
func cleanGlobDir(dir string) string {
	switch dir {
	case "":
		return "."
	case string(filepath.Separator):
		return dir
	}
	return dir[:len(dir)-1]
}

// isNotExist reports a name that does not exist, also because a parent
// is a file (ENOTDIR), which a path lookup treats as no match.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
