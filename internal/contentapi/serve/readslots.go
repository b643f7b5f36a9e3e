package serve

import (
	"context"
	"errors"
	"fmt"
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
// second. The wait for a slot is the shared read's, so it is bounded by
// liveSlotWait, not by any one request (which leaves at its own end, as
// shared says). A read that finds no free slot within liveSlotWait is not
// queued further: its requests are answered 429 with Retry-After, which
// the agent's client retries by itself (client-go retries a 429 that
// carries Retry-After, up to 10 times), then the agent's reconciler with
// backoff.
const (
	maxLiveReads     = 32
	liveSlotWait     = 2 * time.Second
	busyRetrySeconds = 1
)

// errLiveReadsBusy is the answer to a request whose read found no slot:
// 429 with Retry-After, as the API server's own priority and fairness
// answers when it is saturated.
var errLiveReadsBusy = apierrors.NewTooManyRequests(
	"the content API has as many reads of the API server in flight as it allows; retry", busyRetrySeconds)

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

// busyOr is err as the content API answers it: errLiveReadsBusy as it is
// (429, retryable), anything else an internal error about what.
func busyOr(what string, err error) error {
	if errors.Is(err, errLiveReadsBusy) {
		return errLiveReadsBusy
	}
	return apierrors.NewInternalError(fmt.Errorf("%s: %w", what, err))
}

// liveReads is h.live with its reads capped by h.liveSlots.
func (h *handler) liveReads() client.Reader { return cappedReader{r: h.live, slots: &h.liveSlots} }
