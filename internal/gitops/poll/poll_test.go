package poll

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestInterval(t *testing.T) {
	for _, tc := range []struct {
		in   *metav1.Duration
		want time.Duration
	}{
		{in: nil, want: 15 * time.Second},
		{in: &metav1.Duration{}, want: 15 * time.Second},
		{in: &metav1.Duration{Duration: time.Minute}, want: time.Minute},
	} {
		if got := Interval(tc.in); got != tc.want {
			t.Errorf("Interval(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestDelay(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		failures int
		r        float64
		want     time.Duration
	}{
		{interval: 15 * time.Second, failures: 0, r: 0.5, want: 15 * time.Second},
		{interval: 15 * time.Second, failures: 0, r: 0, want: 13500 * time.Millisecond},
		{interval: 15 * time.Second, failures: 0, r: 1, want: 16500 * time.Millisecond},
		{interval: 15 * time.Second, failures: 1, r: 0.5, want: 30 * time.Second},
		{interval: 15 * time.Second, failures: 3, r: 0.5, want: 120 * time.Second},
		{interval: 15 * time.Second, failures: 100, r: 0.5, want: MaxBackoff},
		// A long interval is never shortened by the cap.
		{interval: time.Hour, failures: 5, r: 0.5, want: time.Hour},
	} {
		if got := Delay(tc.interval, tc.failures, tc.r); got != tc.want {
			t.Errorf("Delay(%v, %d, %v) = %v, want %v", tc.interval, tc.failures, tc.r, got, tc.want)
		}
	}
}

func TestTrackerBackoffAndRecovery(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := NewTracker()
	tr.Now = func() time.Time { return now }
	tr.Rand = func() float64 { return 0.5 }
	key := types.NamespacedName{Namespace: "ns", Name: "repo"}

	if due, _ := tr.Due(key); !due {
		t.Fatal("a new repo must be due")
	}
	// Poll whenever due; fail every time; the gaps between attempts grow.
	failing := errors.New("boom")
	for range 6 {
		for {
			due, wait := tr.Due(key)
			if due {
				break
			}
			now = now.Add(wait)
		}
		tr.Record(key, time.Second, failing)
	}
	at := tr.Attempts(key)
	if len(at) != 6 {
		t.Fatalf("attempts %d", len(at))
	}
	for i := 2; i < len(at); i++ {
		if prev, cur := at[i-1].Sub(at[i-2]), at[i].Sub(at[i-1]); cur <= prev {
			t.Fatalf("gap %d (%v) not longer than gap %d (%v)", i, cur, i-1, prev)
		}
	}
	if tr.Failures(key) != 6 {
		t.Fatalf("failures %d", tr.Failures(key))
	}
	// A webhook makes it due at once; success resets the backoff.
	tr.Trigger(key)
	if due, _ := tr.Due(key); !due {
		t.Fatal("triggered repo must be due")
	}
	if d := tr.Record(key, time.Second, nil); d != time.Second {
		t.Fatalf("delay after success %v", d)
	}
	if tr.Failures(key) != 0 {
		t.Fatal("failures not reset")
	}
	tr.Forget(key)
	if len(tr.Attempts(key)) != 0 {
		t.Fatal("forget kept attempts")
	}
}
