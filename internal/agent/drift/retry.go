package drift

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// A deployed custom resource whose kind the agent cannot follow yet (its
// CRD does not exist yet, was deleted, or was deleted and re-created while
// the cached discovery still mapped it) is kept pending and retried in the
// background with backoff: each attempt maps its kind again (the agent's
// mapper refreshes discovery on a miss), and starts or joins an informer
// when it maps. Nothing waits for these attempts: not Watch, not the other
// watches, not the deploy loop. Without them such a resource was followed
// only after the next deploy of its bundle, and an informer whose resource
// vanished sat in client-go's reflector backoff (up to 30-60 s) with an
// empty cache.

// retryMin and retryMax bound the delay between two attempts. It doubles
// after each attempt and starts again at retryMin when Watch finds an
// object it cannot follow, or when the loop was idle for long: a CRD
// created shortly after its resources (by another bundle, or an operator)
// is picked up within a few seconds, and one re-created long after within
// retryMax.
const (
	retryMin = 500 * time.Millisecond
	retryMax = 15 * time.Second
)

// mapErrLogEvery is how often the retry loop logs that one kind could not
// be mapped for another reason than not existing (discovery failing): the
// attempts repeat every few seconds, at once after each deploy, and for
// every deployment using the kind, so each failure is not worth a line.
const mapErrLogEvery = time.Minute

// mapError is a failure to map a kind other than "no such kind", such as
// discovery failing: the kind may or may not exist.
type mapError struct {
	gvk schema.GroupVersionKind
	err error
}

func (e *mapError) Error() string { return fmt.Sprintf("mapping kind %s: %v", e.gvk, e.err) }
func (e *mapError) Unwrap() error { return e.err }

// mapErrLog remembers when the retry loop last logged each kind's mapping
// error. Only the retry loop's goroutine uses it.
type mapErrLog map[schema.GroupVersionKind]time.Time

// objRef is a deployed object by its kind, as the chart renders it.
type objRef struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

// pendingObjs are the objects of a deployment not followed for now. A new
// value replaces the old one whenever they change, so an attempt that
// mapped an older set does not register it.
type pendingObjs struct {
	refs []objRef
}

// mapped is an object whose kind maps: its key and the mapping's kind.
type mapped struct {
	key  objKey
	kind schema.GroupVersionKind
}

// resolve maps refs with the mapper. Refs whose kind does not map are
// returned apart; any other error (a *mapError) fails the whole resolution.
func (w *Watcher) resolve(refs []objRef) (found []mapped, unmapped []objRef, err error) {
	missing := map[schema.GroupVersionKind]bool{} // one lookup per unknown kind
	for _, r := range refs {
		if missing[r.gvk] {
			unmapped = append(unmapped, r)
			continue
		}
		m, err := w.mapping(r.gvk)
		if meta.IsNoMatchError(err) {
			missing[r.gvk] = true
			unmapped = append(unmapped, r)
			continue
		}
		if err != nil {
			return nil, nil, &mapError{gvk: r.gvk, err: err}
		}
		found = append(found, mapped{key: keyFor(m, r.namespace, r.name), kind: m.GroupVersionKind})
	}
	return found, unmapped, nil
}

// retrySoon asks the retry loop for an attempt; reset starts its backoff
// again.
func (w *Watcher) retrySoon(reset bool) {
	if reset {
		w.resetBackoff.Store(true)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// retryLoop runs the attempts until the watcher's context ends. It is idle
// (no timer) while nothing is pending.
func (w *Watcher) retryLoop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	delay, armed := retryMin, false
	var last time.Time
	logged := mapErrLog{}
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.wake:
			// A resource gone right after an attempt started its informer
			// (a stale mapping) waits the grown delay: no tight loop.
			if w.resetBackoff.Swap(false) || time.Since(last) > 2*retryMax {
				delay, armed = retryMin, false
			}
			if !armed {
				timer.Reset(delay)
				armed = true
			}
		case <-timer.C:
			armed = false
			last = time.Now()
			left := w.retryPending(logged)
			delay = min(2*delay, retryMax)
			if left {
				timer.Reset(delay)
				armed = true
			}
		}
	}
}

// retryPending makes one attempt at every pending deployment and reports
// whether some objects are still pending. Mapping happens without the lock
// (a discovery refresh is a few requests); the result is registered only if
// the deployment's pending objects did not change meanwhile. A mapping error
// other than "no such kind" keeps the deployment pending; it is logged at
// V(1) with the kind and the error (never the objects), at most once per
// mapErrLogEvery and kind, as recorded in logged.
func (w *Watcher) retryPending(logged mapErrLog) bool {
	w.mu.Lock()
	snap := make(map[types.NamespacedName]*pendingObjs, len(w.pending))
	for bd, p := range w.pending {
		snap[bd] = p
	}
	w.mu.Unlock()
	for bd, p := range snap {
		found, unmapped, err := w.resolve(p.refs)
		if err != nil {
			w.logMapError(logged, err)
			continue
		}
		if len(found) == 0 {
			continue
		}
		tell := false
		w.mu.Lock()
		if w.pending[bd] != p {
			w.mu.Unlock()
			continue
		}
		for _, f := range found {
			w.ownLocked(f.key, bd)
			inf := w.informers[f.key.gvr]
			if inf == nil {
				// Its first LIST reports the object (an add event)
				// to bd, which is now an owner.
				inf = w.startLocked(f.key.gvr, f.kind)
			} else {
				// That LIST may be over: bd re-evaluates now.
				tell = true
			}
			inf.users++
			w.byBD[bd] = append(w.byBD[bd], f.key)
		}
		if len(unmapped) > 0 {
			w.pending[bd] = &pendingObjs{refs: unmapped}
		} else {
			delete(w.pending, bd)
		}
		w.mu.Unlock()
		if tell {
			w.notify(bd)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) > 0
}

// logMapError logs err, resolve's error, unless its kind's was logged
// within mapErrLogEvery.
func (w *Watcher) logMapError(logged mapErrLog, err error) {
	var me *mapError
	if !errors.As(err, &me) {
		return
	}
	if at, ok := logged[me.gvk]; ok && time.Since(at) < mapErrLogEvery {
		return
	}
	logged[me.gvk] = time.Now()
	log.FromContext(w.ctx).WithName("drift").V(1).Info("cannot map a kind whose objects wait to be watched; retrying",
		"kind", me.gvk.String(), "error", me.err.Error(), "quietFor", mapErrLogEvery.String())
}

// resourceGone stops the informer e, whose resource the API server does not
// serve, and makes the objects it followed pending. The mapper is reset when
// it can be, in case the CRD comes back with another plural or scope.
func (w *Watcher) resourceGone(e *watched) {
	w.mu.Lock()
	if w.informers[e.gvr] != e {
		w.mu.Unlock()
		return
	}
	e.gone.Store(true)
	e.cancel()
	delete(w.informers, e.gvr)
	for bd, keys := range w.byBD {
		var kept []objKey
		var lost []objRef
		for _, k := range keys {
			if k.gvr != e.gvr {
				kept = append(kept, k)
				continue
			}
			lost = append(lost, objRef{gvk: e.kind, namespace: k.namespace, name: k.name})
			if o := w.owners[k]; o != nil {
				delete(o, bd)
				if len(o) == 0 {
					delete(w.owners, k)
				}
			}
		}
		if len(lost) == 0 {
			continue
		}
		w.byBD[bd] = kept
		p := &pendingObjs{refs: lost}
		if old := w.pending[bd]; old != nil {
			p.refs = append(append([]objRef(nil), old.refs...), lost...)
		}
		w.pending[bd] = p
	}
	w.mu.Unlock()
	if r, ok := w.mapper.(meta.ResettableRESTMapper); ok {
		r.Reset()
	}
	w.retrySoon(false)
}
