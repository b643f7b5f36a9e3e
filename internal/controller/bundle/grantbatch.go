package bundle

import (
	"context"
	"sync"
)

// grantBatcher merges concurrent grant requests for one cluster namespace
// into as few ClusterRole writes as possible.
//
// Why: when many bundles roll out at once (50 bundles × 50 clusters), every
// bundle reconcile wants to add its Content to the same per-cluster role at
// the same moment. Written independently, each update conflicts with the
// others, retries, and falls into the controller's error backoff: the
// manager then needs minutes for what the API server can do in seconds.
// Batched, the first caller for a namespace becomes its writer; requests
// arriving while it writes are collected and written together by the next
// round of the same writer, and every caller waits for the write that
// covers its own names.
type grantBatcher struct {
	mu     sync.Mutex
	queues map[string]*grantQueue
}

// grantQueue is the state of one namespace while it has a writer.
type grantQueue struct {
	// next collects the names asked for while the writer is busy.
	next *grantBatch
}

// grantBatch is one write: the union of the names of its callers.
type grantBatch struct {
	names []string
	done  chan struct{}
	err   error
}

// writeGrantFunc writes one batch; base is the role the previous round of
// the same writer produced (nil at first), so that a round does not read a
// cache that has not caught up with the round before.
type writeGrantFunc func(ctx context.Context, ns string, names []string, base *grantBase) error

// grant adds names to the namespace's pending batch and returns when a write
// that includes them has finished (with that write's error).
func (g *grantBatcher) grant(ctx context.Context, ns string, names []string, write writeGrantFunc) error {
	g.mu.Lock()
	if g.queues == nil {
		g.queues = map[string]*grantQueue{}
	}
	q, busy := g.queues[ns]
	if !busy {
		q = &grantQueue{}
		g.queues[ns] = q
	}
	if q.next == nil {
		q.next = &grantBatch{done: make(chan struct{})}
	}
	b := q.next
	b.names = append(b.names, names...)
	g.mu.Unlock()

	if busy {
		select {
		case <-b.done:
			return b.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// This caller is the writer: it writes rounds until nobody waits. The
	// writes outlive a cancelled caller, since others wait for them.
	wctx := context.WithoutCancel(ctx)
	base := &grantBase{}
	for {
		g.mu.Lock()
		cur := q.next
		q.next = nil
		if cur == nil {
			delete(g.queues, ns)
			g.mu.Unlock()
			return b.err
		}
		g.mu.Unlock()
		cur.err = write(wctx, ns, cur.names, base)
		close(cur.done)
	}
}
