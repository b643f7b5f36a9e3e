package schedule

import "time"

// SetDiscoveryRetry lets a test shorten SetupDisabled's discovery retries;
// the returned func restores them.
func SetDiscoveryRetry(attempts int, retry time.Duration) (restore func()) {
	a, r := discoveryAttempts, discoveryRetry
	discoveryAttempts, discoveryRetry = attempts, retry
	return func() { discoveryAttempts, discoveryRetry = a, r }
}
