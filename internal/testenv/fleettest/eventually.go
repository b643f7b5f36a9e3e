package fleettest

import (
	"testing"
	"time"
)

// PollInterval is how long Eventually and Consistently sleep between checks:
// short enough that a test does not wait much longer than the controllers,
// long enough not to load a shared, busy API server.
const PollInterval = 200 * time.Millisecond

// Eventually calls f until it returns nil and fails the test with f's last
// error when timeout passes first. Integration tests poll instead of sleeping
// a fixed time because the machines they run on are loaded; give a generous
// timeout (a minute or more) and let f say what it still waits for.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("condition not met after %s: %v", timeout, err)
		}
		time.Sleep(PollInterval)
	}
}

// Consistently calls f for d and fails the test as soon as it returns an
// error: the check that something does NOT happen (no redeploy, no second
// event) for a while.
func Consistently(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if err := f(); err != nil {
			t.Fatalf("condition broken: %v", err)
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(PollInterval)
	}
}
