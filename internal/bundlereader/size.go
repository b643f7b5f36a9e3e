package bundlereader

import (
	"fmt"
	"unicode/utf8"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
)

// toResources turns files into bundle resources. Text stays plain (readable
// in `kubectl get bundle -o yaml`); binary files (packaged sub-charts) are
// always base64+gz because a JSON string cannot hold them.
func toResources(files []file) ([]fleet.BundleResource, error) {
	out := make([]fleet.BundleResource, 0, len(files))
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f.name] {
			continue
		}
		seen[f.name] = true
		if utf8.Valid(f.content) {
			out = append(out, fleet.BundleResource{Name: f.name, Content: string(f.content)})
			continue
		}
		r, err := manifest.Encode(f.name, string(f.content))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// SizeError is a bundle that cannot be stored even compressed.
type SizeError struct {
	Bundle string
	Size   int
	Limit  int64
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("bundle %q is %d bytes even with compressed resources, over the limit of %d bytes; split it into smaller bundles or exclude files with .fleetignore", e.Bundle, e.Size, e.Limit)
}

func (e *SizeError) Unwrap() error { return ErrLimit }

// fitSize compresses the resources when the serialized bundle reaches the
// compression threshold (as Fleet does at 1,000,000 bytes) and fails with a
// SizeError when it still does not fit.
func fitSize(b *fleet.Bundle, limits Limits) error {
	size, err := jsonSize(b)
	if err != nil {
		return err
	}
	if int64(size) < limits.CompressThreshold && int64(size) <= limits.MaxBundleSize {
		return nil
	}
	for i, r := range b.Spec.Resources {
		if r.Encoding != "" {
			continue
		}
		enc, err := manifest.Encode(r.Name, r.Content)
		if err != nil {
			return err
		}
		b.Spec.Resources[i] = enc
	}
	if size, err = jsonSize(b); err != nil {
		return err
	}
	if int64(size) > limits.MaxBundleSize {
		return &SizeError{Bundle: b.Name, Size: size, Limit: limits.MaxBundleSize}
	}
	return nil
}

// charge counts n bytes of content held in memory that were not read
// through readFile (files of downloaded and extracted charts) against
// Limits.MaxTotalSize, the budget readFile counts repository files
// against. The reader runs inside the manager: without one budget, a
// chart with many dependencies that each expand to tens of MiB would
// exhaust its memory, and a manager restarted by the OOM killer would
// read the same commit again.
func (f *fsys) charge(n int64) error {
	f.readSize += n
	if f.readSize > f.limits.MaxTotalSize {
		return fmt.Errorf("repository files and chart content read exceed the limit of %d bytes: %w", f.limits.MaxTotalSize, ErrLimit)
	}
	return nil
}
