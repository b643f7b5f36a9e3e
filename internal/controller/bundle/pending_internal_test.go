package bundle

import (
	"errors"
	"testing"
	"time"

	"github.com/fleetgo/fleet/internal/target"
)

// TestPendingLeft: a Bundle with a Pending target is reconciled again just
// after the pending window ends, so that the cluster's error shows; other
// targets ask for no requeue.
func TestPendingLeft(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	failed := errors.New("cluster has no namespace yet")
	for _, tc := range []struct {
		name     string
		tg       *target.Target
		min, max time.Duration
	}{
		{name: "pending", tg: &target.Target{Err: failed, Pending: true, PendingUntil: now.Add(time.Minute)},
			min: time.Minute, max: 2 * time.Minute},
		{name: "pending, unbounded", tg: &target.Target{Err: failed, Pending: true}},
		{name: "reported", tg: &target.Target{Err: failed, PendingUntil: now.Add(-time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pendingLeft(tc.tg, now); got < tc.min || got > tc.max {
				t.Fatalf("pendingLeft = %v, want in [%v, %v]", got, tc.min, tc.max)
			}
		})
	}
}
