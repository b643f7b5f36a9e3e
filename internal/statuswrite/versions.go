// Package statuswrite holds what status writers built on a cache share:
// the decision whether a write may be skipped because the status computed
// equals the cached object's (Versions), and the write loop built on it
// (Write), so that every kind answers it, and handles conflicts, alike.
//
// A skip is not always safe. The cache may not yet hold this process's own
// last status write: Ready written, then "waiting" written, then Ready
// computed against the still cached Ready copy looks unchanged while
// "waiting" is stored.
// A status-only update bumps no generation, so a controller that ignores
// such updates gets no later event to correct it, and the stale status
// would stay for good.
package statuswrite

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Versions maps objects to the resourceVersion at which this process last
// wrote their status, or read it from the API server and found it right.
// The zero value is ready to use; it is safe for concurrent use.
type Versions struct {
	m sync.Map
}

// Wrote records a status write of key that left it at resourceVersion rv.
func (v *Versions) Wrote(key types.NamespacedName, rv string) {
	v.m.Store(key, rv)
}

// SkipEqual is asked when the status computed for key equals that of a copy
// at resourceVersion rv; fresh says the copy was read from the API server,
// not from the cache. It answers true, and records rv, when the write may
// be skipped: the copy is fresh, or no write was recorded, or the recorded
// one is what the copy shows. Otherwise the cached copy may predate the
// last write and the caller must compare with the API server's copy
// before skipping. Another writer (a spec or label change) also moves the
// version; that costs one read, after which rv is recorded.
func (v *Versions) SkipEqual(key types.NamespacedName, rv string, fresh bool) bool {
	if !fresh && v.mayBeBehind(key, rv) {
		return false
	}
	v.m.Store(key, rv)
	return true
}

// Forget drops key, whose object is gone.
func (v *Versions) Forget(key types.NamespacedName) {
	v.m.Delete(key)
}

// mayBeBehind says whether a cached copy of key at rv may be older than the
// last recorded status: one was recorded and the copy shows another
// version.
func (v *Versions) mayBeBehind(key types.NamespacedName, rv string) bool {
	last, ok := v.m.Load(key)
	return ok && last.(string) != rv
}
