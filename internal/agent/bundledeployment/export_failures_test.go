package bundledeployment

import "k8s.io/apimachinery/pkg/types"

// FailedAttempts is how many deploy attempts of a BundleDeployment in a
// row failed for the reconcilers started in this test binary (what its
// backoff grows with), so that a test can wait for a grown backoff.
func FailedAttempts(namespace, name string) int {
	startedMu.Lock()
	defer startedMu.Unlock()
	n := 0
	key := types.NamespacedName{Namespace: namespace, Name: name}
	for _, r := range started {
		r.mu.Lock()
		if f := r.failures[key]; f != nil {
			n += f.count
		}
		r.mu.Unlock()
	}
	return n
}
