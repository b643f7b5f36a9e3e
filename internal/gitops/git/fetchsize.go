package git

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"
)

// fetchSizeInterval is how often a running fetch's size on disk is checked.
const fetchSizeInterval = 100 * time.Millisecond

// boundFetch returns a context for a fetch into dir that is cancelled, with
// an ErrTooLarge cause, as soon as dir holds more than limit bytes; and a
// check to call once the fetch has returned, which reports the same for a
// fetch too quick to be caught while running; and a stop that ends the
// watch (call it when the fetch is done). go-git streams a pack to disk
// with no size limit of its own; without this one repository could fill
// the manager's disk.
func boundFetch(ctx context.Context, dir string, limit int64) (context.Context, func() error, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	tooLarge := func() error {
		if n := dirSize(dir); n > limit {
			return fmt.Errorf("%w: the fetch stored more than %d bytes (%d); raise the manager's git fetch limit or fetch less (a narrower revision, a smaller repository)", ErrTooLarge, limit, n)
		}
		return nil
	}
	go func() {
		t := time.NewTicker(fetchSizeInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := tooLarge(); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	check := func() error {
		if cause := context.Cause(ctx); errors.Is(cause, ErrTooLarge) {
			return cause
		}
		return tooLarge()
	}
	return ctx, check, func() { cancel(nil) }
}

// dirSize is the total size of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
