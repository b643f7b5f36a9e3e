package simulator

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestContentOverloadRetriedShortly: like the real agent, a simulated one
// whose Content read is refused with 429 Too Many Requests counts no
// failure of the deployment (which would grow its backoff) and reads it
// again after a short fixed wait; a 500 is a failure as before.
func TestContentOverloadRetriedShortly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, requests := testAgentAnswering(t, ctx, http.StatusTooManyRequests)
	bd := bundleDeployment("bd", "s-1:1")
	a.handle(ctx, &bd)
	if requests.Load() == 0 {
		t.Fatal("the content was not read")
	}
	a.mu.Lock()
	n := a.failures["bd"]
	a.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d failures counted for an overloaded API server, want none", n)
	}
	select {
	case name := <-a.retries:
		if name != "bd" {
			t.Fatalf("retried %q", name)
		}
	case <-time.After(time.Minute):
		t.Fatal("no retry within a minute")
	}

	failing, _ := testAgentAnswering(t, ctx, http.StatusInternalServerError)
	failing.handle(ctx, &bd)
	failing.mu.Lock()
	defer failing.mu.Unlock()
	if failing.failures["bd"] != 1 {
		t.Fatalf("failures %v after a 500, want 1", failing.failures)
	}
}
