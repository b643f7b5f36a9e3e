package deployer

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A release's lock is held by one at a time, a waiter gives up with its
// context, and the lock of a release nobody holds or waits for is dropped.
func TestReleaseLocks(t *testing.T) {
	var l releaseLocks
	ctx := context.Background()
	unlock, err := l.lock(ctx, "ns/a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.lock(ctx, "ns/b")
	if err != nil {
		t.Fatalf("another release's lock: %v", err)
	}
	other()

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := l.lock(short, "ns/a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock of a held release: err = %v, want the context's", err)
	}

	got := make(chan func())
	go func() {
		u, err := l.lock(ctx, "ns/a")
		if err != nil {
			t.Error(err)
		}
		got <- u
	}()
	select {
	case <-got:
		t.Fatal("a second holder got the lock while the first held it")
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	(<-got)()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.locks) != 0 {
		t.Fatalf("%d locks kept after all were released", len(l.locks))
	}
}
