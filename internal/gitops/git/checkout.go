package git

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Limits bound a checkout. Zero fields mean the defaults.
type Limits struct {
	// MaxBytes is the total size of all files (default 100 MiB).
	MaxBytes int64
	// MaxFiles is the number of files (default 20000).
	MaxFiles int
	// MaxFetchBytes is what a fetch may store on disk, objects and packs
	// (default 512 MiB): a shallow fetch is about the checkout's size
	// compressed, but a server that refuses to send a single commit gets a
	// full fetch of every branch and its history.
	MaxFetchBytes int64
}

// Default limits: far beyond what fits in Bundles (etcd objects are a few
// MiB), small enough that one bad repo cannot fill the manager's disk.
const (
	DefaultMaxBytes      = 100 << 20
	DefaultMaxFiles      = 20000
	DefaultMaxFetchBytes = 512 << 20
)

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.MaxFetchBytes <= 0 {
		l.MaxFetchBytes = DefaultMaxFetchBytes
	}
	return l
}

// ErrTooLarge means the checkout exceeds Limits.
var ErrTooLarge = errors.New("repository checkout too large")

// ErrUnsafePath means the tree holds a path or symlink that would leave the
// checkout directory.
var ErrUnsafePath = errors.New("unsafe path in repository")

// budget is what is left of Limits for the files of one checkout, shared
// by the repository and its submodules.
type budget struct {
	files  int
	bytes  int64
	limits Limits
}

func newBudget(l Limits) *budget {
	l = l.withDefaults()
	return &budget{files: l.MaxFiles, bytes: l.MaxBytes, limits: l}
}

// writeTree writes tree's files under dst and takes them from b. Sizes are
// checked from the object headers before anything is written; symlinks are
// created only when their target stays inside dst, and after all regular
// files so that nothing is written through them. Submodules (gitlinks) are
// left to writeSubmodules.
func writeTree(tree *object.Tree, dst string, b *budget) error {
	type entry struct {
		name string
		mode filemode.FileMode
		file *object.File
	}
	var entries []entry
	var total int64
	err := tree.Files().ForEach(func(f *object.File) error {
		if err := checkName(f.Name); err != nil {
			return err
		}
		total += f.Size
		if len(entries)+1 > b.files {
			return fmt.Errorf("%w: more than %d files", ErrTooLarge, b.limits.MaxFiles)
		}
		if total > b.bytes {
			return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, b.limits.MaxBytes)
		}
		entries = append(entries, entry{name: f.Name, mode: f.Mode, file: f})
		return nil
	})
	if err != nil {
		return err
	}
	b.files -= len(entries)
	b.bytes -= total
	var links []entry
	for _, e := range entries {
		switch e.mode {
		case filemode.Symlink:
			links = append(links, e)
			continue
		case filemode.Regular, filemode.Executable, filemode.Deprecated:
		default:
			continue
		}
		if err := writeFile(dst, e.name, e.file, e.mode == filemode.Executable); err != nil {
			return err
		}
	}
	for _, e := range links {
		target, err := e.file.Contents()
		if err != nil {
			return err
		}
		if err := checkLink(e.name, target); err != nil {
			return err
		}
		p := filepath.Join(dst, filepath.FromSlash(e.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.Symlink(target, p); err != nil {
			return err
		}
	}
	return nil
}

// checkName refuses tree paths that could escape dst (crafted trees can hold
// ".." entries) or that would write into a .git directory.
func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") {
		return fmt.Errorf("%w: %q", ErrUnsafePath, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." || strings.EqualFold(part, ".git") || strings.Contains(part, "\\") {
			return fmt.Errorf("%w: %q", ErrUnsafePath, name)
		}
	}
	return nil
}

// checkLink refuses absolute symlinks and relative ones that climb out of the
// checkout. Because every link is checked lexically against the root, a
// chain of links cannot leave it either.
func checkLink(name, target string) error {
	if target == "" || path.IsAbs(target) || filepath.IsAbs(target) || strings.Contains(target, "\\") {
		return fmt.Errorf("%w: symlink %s -> %s points outside the checkout", ErrUnsafePath, name, target)
	}
	resolved := path.Clean(path.Join(path.Dir(name), target))
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("%w: symlink %s -> %s points outside the checkout", ErrUnsafePath, name, target)
	}
	if resolved == ".git" || strings.HasPrefix(resolved, ".git/") {
		return fmt.Errorf("%w: symlink %s -> %s points into .git", ErrUnsafePath, name, target)
	}
	return nil
}

func writeFile(dst, name string, f *object.File, exec bool) error {
	p := filepath.Join(dst, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	mode := os.FileMode(0o600)
	if exec {
		mode = 0o700
	}
	out, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	r, err := f.Reader()
	if err != nil {
		_ = out.Close()
		return err
	}
	// The size was checked from the header; copy at most that much.
	_, err = io.Copy(out, io.LimitReader(r, f.Size))
	_ = r.Close()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
