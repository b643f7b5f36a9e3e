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
	mu sync.Mutex
	// pending has an entry for each namespace whose writer is running;
	// the value collects the requests for the writer's next round (nil:
	// none yet).
	pending map[string]*grantBatch
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
	if g.pending == nil {
		g.pending = map[string]*grantBatch{}
	}
	b, busy := g.pending[ns]
	if b == nil {
		b = &grantBatch{done: make(chan struct{})}
		g.pending[ns] = b
	}
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
		cur := g.pending[ns]
		if cur == nil {
			delete(g.pending, ns)
			g.mu.Unlock()
			return b.err
		}
		g.pending[ns] = nil // still busy: later requests start a new round
		g.mu.Unlock()
		cur.err = write(wctx, ns, cur.names, base)
		close(cur.done)
	}
}
