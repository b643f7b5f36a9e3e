package serve

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// heldReader answers Contents once release is closed, and fails a read
// whose context ended by then, as the API server's client does.
type heldReader struct {
	client.Reader
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (r *heldReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if r.calls.Add(1) == 1 {
		close(r.entered)
	}
	<-r.release
	if err := ctx.Err(); err != nil {
		return err
	}
	obj.(*fleet.Content).Content = []byte("manifest of " + key.Name)
	return nil
}

// TestContentFlightOutlivesFirstCaller: the read shared by every agent
// asking for a Content does not end with the request that started it. A
// rollout makes thousands of agents wait on that read; the first one
// going away must not answer all the others an error.
func TestContentFlightOutlivesFirstCaller(t *testing.T) {
	// The second caller may, rarely, reach the flight only after the first
	// read ended (then it reads on its own and proves nothing): try again.
	for attempt := 0; attempt < 20; attempt++ {
		r := &heldReader{entered: make(chan struct{}), release: make(chan struct{})}
		joined := make(chan struct{}, 2)
		c := &contentCache{joining: func() { joined <- struct{}{} }}

		ctx1, cancel1 := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = c.get(ctx1, r, "s-1")
		}()
		<-joined
		<-r.entered
		var got *fleet.Content
		var err error
		go func() {
			defer wg.Done()
			got, err = c.get(context.Background(), r, "s-1")
		}()
		<-joined
		for i := 0; i < 100; i++ {
			runtime.Gosched()
		}
		cancel1() // the first agent disconnects while the read is in flight
		close(r.release)
		wg.Wait()
		if r.calls.Load() != 1 {
			continue
		}
		if err != nil {
			t.Fatalf("second caller sharing the read: %v; want the Content despite the first caller's cancelled request", err)
		}
		if string(got.Content) != "manifest of s-1" {
			t.Fatalf("second caller got %q", got.Content)
		}
		return
	}
	t.Fatal("the two callers never shared one read")
}
