package bundle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestGrantBatcherMergesConcurrentRequests: while one write for a namespace
// is in flight, the requests of 49 other reconciles queue up and are written
// together in one more round; every caller returns only after a write that
// includes its own name, with that write's error.
func TestGrantBatcherMergesConcurrentRequests(t *testing.T) {
	var g grantBatcher
	release := make(chan struct{})
	var mu sync.Mutex
	var rounds [][]string
	write := func(_ context.Context, ns string, names []string, base *grantBase) error {
		mu.Lock()
		rounds = append(rounds, slices.Clone(names))
		n := len(rounds)
		mu.Unlock()
		if n == 1 {
			<-release
		}
		if slices.Contains(names, "bad") {
			return errors.New("refused")
		}
		return nil
	}
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- g.grant(ctx, "ns1", []string{"c0"}, write) }()
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(rounds) == 1 })

	errs := make(chan error, 49)
	for i := 1; i < 50; i++ {
		name := fmt.Sprintf("c%d", i)
		if i == 49 {
			name = "bad"
		}
		go func() { errs <- g.grant(ctx, "ns1", []string{name}, write) }()
	}
	waitFor(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		b := g.pending["ns1"]
		return b != nil && len(b.names) == 49
	})
	// Another namespace is not held up by ns1's writer.
	if err := g.grant(ctx, "ns2", []string{"x"}, func(context.Context, string, []string, *grantBase) error { return nil }); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first caller: %v", err)
	}
	failed := 0
	for i := 1; i < 50; i++ {
		if err := <-errs; err != nil {
			failed++
		}
	}
	if len(rounds) != 2 || len(rounds[1]) != 49 {
		t.Fatalf("want 2 writes (1 name, then the 49 queued together), got %d: %v", len(rounds), rounds)
	}
	// The batch containing "bad" failed: all its callers see the error.
	if failed != 49 {
		t.Fatalf("%d of the 49 callers of the failed write got an error", failed)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) != 0 {
		t.Fatalf("idle batcher still holds namespaces: %v", g.pending)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}
