// Package poll decides when each GitRepo's remote is checked next: every
// pollingInterval (default 15s) with ±10% jitter so that many repos do not
// poll in lock step, and with exponential backoff for repos whose git host
// keeps failing, so that hundreds of broken repos cannot exhaust a git
// host's rate limit (Fleet polls a failing repo as often as a healthy one).
//
// A commit that cannot be built or applied has a backoff of its own (the
// rebuild schedule, RecordSync and FailedSync): the cheap ref lookup goes on
// at the normal interval, so that the commit fixing it is built as soon as
// it is seen, while the same failing input is not rebuilt in a hot loop.
package poll

import (
	"math/rand/v2"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// DefaultInterval is used when pollingInterval is unset or 0.
	DefaultInterval = 15 * time.Second
	// MaxBackoff caps the delay between attempts for a failing repo (unless
	// the repo's own interval is longer).
	MaxBackoff = 10 * time.Minute
	// Jitter is the fraction by which each delay is randomly varied.
	Jitter = 0.1
	// maxAttempts is how many attempt times are kept per repo.
	maxAttempts = 32
)

// Interval returns the polling interval of a GitRepo spec value.
func Interval(d *metav1.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return DefaultInterval
	}
	return d.Duration
}

// Delay is the wait before the next attempt after failures consecutive
// failures: interval·2^failures, capped at max(interval, MaxBackoff), then
// varied by ±Jitter using r (a number in [0,1)).
func Delay(interval time.Duration, failures int, r float64) time.Duration {
	limit := max(interval, MaxBackoff)
	d := interval
	for i := 0; i < failures && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return time.Duration(float64(d) * (1 - Jitter + 2*Jitter*r))
}

// Tracker remembers, per GitRepo, when it was last polled, how often in a
// row polling failed, and when the next poll is due. It is safe for
// concurrent use. It lives in memory: after a restart every repo is polled
// once at start-up, which is what a restart should do anyway.
type Tracker struct {
	// Now and Rand may be replaced in tests.
	Now  func() time.Time
	Rand func() float64

	mu sync.Mutex
	m  map[types.NamespacedName]*state
}

type state struct {
	next     time.Time
	failures int
	attempts []time.Time
	// build is the rebuild schedule of the input whose sync failed last.
	build buildState
}

// buildState is the backoff of one failing build input: input is what was
// built (an opaque key the caller chooses), failures how often in a row
// it failed, err the last error, next when it may be built again.
type buildState struct {
	input    string
	failures int
	err      error
	next     time.Time
}

// NewTracker returns a Tracker using the real clock.
func NewTracker() *Tracker {
	return &Tracker{Now: time.Now, Rand: rand.Float64, m: map[types.NamespacedName]*state{}}
}

func (t *Tracker) get(key types.NamespacedName) *state {
	s, ok := t.m[key]
	if !ok {
		s = &state{}
		t.m[key] = s
	}
	return s
}

// Due reports whether key should be polled now; if not, it also returns how
// long until it should. A repo never polled is due.
func (t *Tracker) Due(key types.NamespacedName) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(key)
	wait := s.next.Sub(t.Now())
	if s.next.IsZero() || wait <= 0 {
		return true, 0
	}
	return false, wait
}

// Record notes an attempt that ended with err (nil for success) and returns
// the delay until the next one.
func (t *Tracker) Record(key types.NamespacedName, interval time.Duration, err error) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(key)
	now := t.Now()
	s.attempts = append(s.attempts, now)
	if len(s.attempts) > maxAttempts {
		s.attempts = s.attempts[len(s.attempts)-maxAttempts:]
	}
	if err != nil {
		s.failures++
	} else {
		s.failures = 0
	}
	d := Delay(interval, s.failures, t.Rand())
	s.next = now.Add(d)
	return d
}

// Trigger makes key due at once (a webhook said the repo changed). The
// failure count is kept: a webhook does not make a broken repo healthy.
func (t *Tracker) Trigger(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.get(key).next = time.Time{}
}

// RecordSync notes a build (fetch, build and apply of a commit) of input
// that ended with err (nil for success). input identifies what was built
// (the commit and whatever else changes the result): a different input is
// never held back by this one's failures, while consecutive failures of the
// same input back off as Delay says. The ref lookups of Due and Record go
// on meanwhile at their own pace.
func (t *Tracker) RecordSync(key types.NamespacedName, interval time.Duration, input string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(key)
	if err == nil {
		s.build = buildState{}
		return
	}
	if s.build.input != input {
		s.build = buildState{input: input}
	}
	s.build.failures++
	s.build.err = err
	s.build.next = t.Now().Add(Delay(interval, s.build.failures, t.Rand()))
}

// SyncFailure is the last failed build of a GitRepo.
type SyncFailure struct {
	// Input is what was built, as given to RecordSync.
	Input string
	// Err is the build's error.
	Err error
	// Wait is how long until Input may be built again; zero or less: now.
	Wait time.Duration
}

// FailedSync returns the last failed build of key, if its last build
// failed.
func (t *Tracker) FailedSync(key types.NamespacedName) (SyncFailure, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.get(key).build
	if b.failures == 0 {
		return SyncFailure{}, false
	}
	return SyncFailure{Input: b.input, Err: b.err, Wait: b.next.Sub(t.Now())}, true
}

// Failures returns the number of consecutive failed attempts: failed ref
// lookups plus failed builds of the current input.
func (t *Tracker) Failures(key types.NamespacedName) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(key)
	return s.failures + s.build.failures
}

// Attempts returns the times of the most recent attempts, oldest first.
func (t *Tracker) Attempts(key types.NamespacedName) []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Time(nil), t.get(key).attempts...)
}

// Forget drops key (the GitRepo was deleted).
func (t *Tracker) Forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, key)
}
