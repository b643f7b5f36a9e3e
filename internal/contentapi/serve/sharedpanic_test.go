package serve

import (
	"context"
	"strings"
	"testing"

	"golang.org/x/sync/singleflight"
)

// TestSharedReadPanicIsAnError: a shared read runs on singleflight's own
// goroutine, where a panic would end the whole manager; the waiter gets
// an error instead, and the key is free for the next read.
func TestSharedReadPanicIsAnError(t *testing.T) {
	var g singleflight.Group
	_, err := shared(context.Background(), &g, "k", func() (any, error) { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err = %v, want the panic as an error", err)
	}
	v, err := shared(context.Background(), &g, "k", func() (any, error) { return "ok", nil })
	if err != nil || v != "ok" {
		t.Fatalf("next read: %v, %v; want ok", v, err)
	}
}
