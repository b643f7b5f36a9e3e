package serve

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Bounds of the reads the content API sends the API server on its own
// (cache misses: the live look at a deployment or a namespace, and the
// Content itself).
//
// Those reads share one singleflight per object and run detached from the
// request, so nothing else limits how many are in flight: agents asking at
// once for many distinct objects the cache lacks (a rollout of many new
// Contents, agents ahead of the manager's watch, or a looping agent naming
// random deployments) would each start one. The manager's client has no
// client-side rate limit (controller-runtime leaves it to the API server's
// priority and fairness), so they would all land on the API server, in the
// priority level the manager's own controllers use, and queue or crowd out
// their writes. maxLiveReads keeps the content API's share of that level
// small; a read is a single GET or LIST of one namespace, which the API
// server answers in milliseconds, so 32 slots pass thousands of reads a
// second.
//
// Content reads have a pool of their own (handler.contentSlots): in a
// rollout thousands of agents wait on one shared Content read, so the
// misses of deployments, one per agent ahead of the manager's watch, must
// not starve it. Their number is bounded anyway by the distinct Contents
// deployments name.
//
// A read waits for a slot at most liveSlotWait: enough to absorb a burst
// while the API server answers in milliseconds, short because every
// request waiting on the read holds a seat of the API server's priority
// and fairness (the aggregation layer proxies it) all that time. A read
// that finds no slot is not queued further: its requests are answered 429
// with a Retry-After drawn from busyRetryMin to busyRetryMax seconds, so
// that the waiters of one read, answered at once, do not come back at
// once. The agent's client retries it by itself (client-go retries a 429
// that carries Retry-After, up to 10 times, after that many seconds), then
// the agent's reconciler with backoff.
const (
	maxLiveReads = 32
	liveSlotWait = 100 * time.Millisecond
	busyRetryMin = 1
	busyRetryMax = 5
)

// errLiveReadsBusy is the error of a read that found no slot; busyOr
// answers it 429.
var errLiveReadsBusy = errors.New("the content API has as many reads of the API server in flight as it allows")

// tooBusy is the answer of a request that cannot be served now because the
// content API or the API server behind it is saturated: 429 with a random
// Retry-After, as the API server's own priority and fairness answers.
func tooBusy(why string) error {
	return apierrors.NewTooManyRequests(why+"; retry", busyRetryMin+rand.IntN(busyRetryMax-busyRetryMin+1))
}

// readSlots is a semaphore of size slots (0: maxLiveReads), made on first
// use so that a handler's zero value has one.
type readSlots struct {
	size  int
	once  sync.Once
	slots chan struct{}
}

// acquire takes a slot, waiting at most liveSlotWait and as long as ctx
// lasts; release gives it back. It answers errLiveReadsBusy when no slot
// came in time, ctx's error when ctx ended first.
func (s *readSlots) acquire(ctx context.Context) (release func(), err error) {
	s.once.Do(func() {
		if s.size <= 0 {
			s.size = maxLiveReads
		}
		s.slots = make(chan struct{}, s.size)
	})
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots }, nil
	default:
	}
	t := time.NewTimer(liveSlotWait)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots }, nil
	case <-t.C:
		return nil, errLiveReadsBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// cappedReader is a Reader whose every read holds one of slots while it
// is in flight.
type cappedReader struct {
	r     client.Reader
	slots *readSlots
}

func (c cappedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	release, err := c.slots.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	return c.r.Get(ctx, key, obj, opts...)
}

func (c cappedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	release, err := c.slots.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	return c.r.List(ctx, list, opts...)
}

// busyOr is err as the content API answers it: 429 (tooBusy) when no slot
// was free, or when the API server was saturated or too slow (its own 429
// or timeout, which the manager's client has already retried, or the
// shared read's deadline): the agent's client retries those. Anything else
// is an internal error about what.
func busyOr(what string, err error) error {
	switch {
	case errors.Is(err, errLiveReadsBusy):
		return tooBusy(errLiveReadsBusy.Error())
	case apierrors.IsTooManyRequests(err), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		errors.Is(err, context.DeadlineExceeded):
		return tooBusy(fmt.Sprintf("%s: the API server is busy: %v", what, err))
	}
	return apierrors.NewInternalError(fmt.Errorf("%s: %w", what, err))
}

// liveReads is h.live with its reads capped by h.liveSlots.
func (h *handler) liveReads() client.Reader { return cappedReader{r: h.live, slots: &h.liveSlots} }

// contentReads is h.live with its reads capped by h.contentSlots.
func (h *handler) contentReads() client.Reader {
	return cappedReader{r: h.live, slots: &h.contentSlots}
}
