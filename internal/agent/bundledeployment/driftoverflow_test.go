package bundledeployment

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Drift events that find the events buffer full after the reconciler
// stopped (nobody reads it any more) leave no sender behind: each gives up
// with the run context instead of blocking for good.
func TestDriftOverflowAfterStopLeavesNoSender(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	r := &Reconciler{events: make(chan event.GenericEvent, 1), runCtx: ctx}
	r.driftEvent(types.NamespacedName{Namespace: "ns", Name: "first"}) // fills the buffer
	stop()

	const overflow = 50
	for range overflow {
		r.driftEvent(types.NamespacedName{Namespace: "ns", Name: "late"})
	}
	// The senders end on their own once scheduled; the deadline only
	// ends a failing test.
	left := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if left = driftSenders(); left == 0 {
			break
		}
	}
	if left != 0 {
		t.Fatalf("%d of %d drift event senders still blocked after the reconciler stopped", left, overflow)
	}
	if n := len(r.events); n != 1 {
		t.Fatalf("events holds %d events, want the 1 sent before the stop", n)
	}
}

// driftSenders is how many goroutines driftEvent started are alive (in
// this test binary, which also runs an agent: counting all goroutines
// would count its informers too).
func driftSenders() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), ".(*Reconciler).driftEvent.func")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// While the reconciler runs, an event that found the buffer full is
// delivered once there is room.
func TestDriftOverflowDeliveredWhileRunning(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	r := &Reconciler{events: make(chan event.GenericEvent, 1), runCtx: ctx}
	r.driftEvent(types.NamespacedName{Namespace: "ns", Name: "first"})
	r.driftEvent(types.NamespacedName{Namespace: "ns", Name: "second"})
	for _, want := range []string{"first", "second"} {
		if got := (<-r.events).Object.GetName(); got != want {
			t.Fatalf("event for %s, want %s", got, want)
		}
	}
}
