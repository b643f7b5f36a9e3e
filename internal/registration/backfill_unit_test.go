package registration

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestBackfillDelay: clusters whose agentConfigHash an upgraded manager
// backfills are spread over the window instead of all being installed
// again at once. Each cluster keeps its own delay at every look (it is
// installed once, when its turn comes, not pushed back at each
// reconcile), and none waits past the window.
func TestBackfillDelay(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const spread = 10 * time.Minute
	const n = 1000
	buckets := make([]int, 10)
	for i := range n {
		uid := types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		d := backfillDelay(uid, start, start, spread)
		if d < 0 || d >= spread {
			t.Fatalf("cluster %d waits %s, want within [0, %s)", i, d, spread)
		}
		buckets[int(d*10/spread)]++
		// Looked at again later, it waits for the same instant.
		later := start.Add(3 * time.Minute)
		if got := backfillDelay(uid, start, later, spread); got != max(d-3*time.Minute, 0) {
			t.Fatalf("cluster %d: delay %s at the start, %s three minutes later", i, d, got)
		}
		if got := backfillDelay(uid, start, start.Add(spread), spread); got != 0 {
			t.Fatalf("cluster %d still waits %s once the window is over", i, got)
		}
	}
	// Spread over the window: no tenth of it gets more than twice its
	// share (a burst), none is left empty.
	for i, c := range buckets {
		if c == 0 || c > 2*n/10 {
			t.Errorf("minutes %d-%d of the window: %d of %d clusters", i, i+1, c, n)
		}
	}
	if got := backfillDelay("any", start, start, 0); got != 0 {
		t.Errorf("without a window a cluster waits %s", got)
	}
}
