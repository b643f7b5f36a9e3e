package poll

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestRebuildBackoffIsSeparate: a failing build backs off on its own
// schedule, per input, without delaying the ref lookups; another input is
// built at once; a success clears it.
func TestRebuildBackoffIsSeparate(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := NewTracker()
	tr.Now = func() time.Time { return now }
	tr.Rand = func() float64 { return 0.5 }
	key := types.NamespacedName{Namespace: "ns", Name: "repo"}
	broken := errors.New("broken commit")

	if _, ok := tr.FailedSync(key); ok {
		t.Fatal("a new repo has no failed build")
	}
	var waits []time.Duration
	for range 4 {
		// The ref lookup works: the poll stays at the interval.
		if d := tr.Record(key, time.Second, nil); d != time.Second {
			t.Fatalf("poll delay %v while only the build fails", d)
		}
		tr.RecordSync(key, time.Second, "c2", broken)
		f, ok := tr.FailedSync(key)
		if !ok || f.Input != "c2" || !errors.Is(f.Err, broken) {
			t.Fatalf("failed build %+v %v", f, ok)
		}
		waits = append(waits, f.Wait)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] <= waits[i-1] {
			t.Fatalf("rebuild waits do not grow: %v", waits)
		}
	}
	if due, _ := tr.Due(key); due {
		t.Fatal("the poll is due before its interval")
	}
	if got := tr.Failures(key); got != 4 {
		t.Fatalf("failures %d, want 4 (the builds)", got)
	}
	// Another input starts its backoff afresh.
	tr.RecordSync(key, time.Second, "c3", broken)
	if f, _ := tr.FailedSync(key); f.Input != "c3" || f.Wait != 2*time.Second {
		t.Fatalf("new input %+v", f)
	}
	now = now.Add(2 * time.Second)
	if f, _ := tr.FailedSync(key); f.Wait > 0 {
		t.Fatalf("backoff not over: %+v", f)
	}
	tr.RecordSync(key, time.Second, "c3", nil)
	if _, ok := tr.FailedSync(key); ok || tr.Failures(key) != 0 {
		t.Fatalf("success did not clear the failed build (failures %d)", tr.Failures(key))
	}
}
