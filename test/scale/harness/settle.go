package harness

import (
	"context"
	"fmt"
	"time"

	kwait "k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// settle waits until the manager has rolled the creation up: every Cluster
// counts all bundles Ready and every Bundle all clusters. A change timed
// from any earlier moment would share the API server with the creation's
// trailing Cluster status writes (new clusters' summaries are held back
// for the manager's settle time), which a bundle change on a real fleet,
// made long after its clusters joined, never does. It returns how long
// it waited and an error naming what was still not rolled up at timeout.
func settle(ctx context.Context, c client.Client, clusters, bundles int, timeout time.Duration) (time.Duration, error) {
	allReady := func(want int) func(string, fleet.BundleSummary) bool {
		return func(_ string, s fleet.BundleSummary) bool { return s.Ready == want && s.DesiredReady == want }
	}
	return settleUntil(ctx, c, timeout, allReady(clusters), allReady(bundles))
}

// settleUntil waits until every Bundle's summary passes bundleOK and every
// simulated Cluster's passes clusterOK (its name is the Bundle's or the
// Cluster's).
func settleUntil(ctx context.Context, c client.Client, timeout time.Duration, bundleOK, clusterOK func(string, fleet.BundleSummary) bool) (time.Duration, error) {
	start := time.Now()
	var last string
	err := kwait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		pending, err := unsettled(ctx, c, bundleOK, clusterOK)
		if err != nil {
			last = err.Error() // a failed read is retried like a pending summary
			return false, nil
		}
		last = pending
		return pending == "", nil
	})
	if err != nil {
		return time.Since(start), fmt.Errorf("%s: %w", last, err)
	}
	return time.Since(start), nil
}

// unsettled describes the first Bundle or simulated Cluster (the bundles'
// targets; a real agent's cluster is not one) whose summary does not yet
// pass its test, or returns "".
func unsettled(ctx context.Context, c client.Client, bundleOK, clusterOK func(string, fleet.BundleSummary) bool) (string, error) {
	bl := &fleet.BundleList{}
	if err := c.List(ctx, bl, client.InNamespace(workspace)); err != nil {
		return "", err
	}
	for _, b := range bl.Items {
		if s := b.Status.Summary; !bundleOK(b.Name, s) {
			return fmt.Sprintf("bundle %s summary %d/%d Ready, %d WaitApplied", b.Name, s.Ready, s.DesiredReady, s.WaitApplied), nil
		}
	}
	cont := ""
	for {
		cl := &fleet.ClusterList{}
		if err := c.List(ctx, cl, client.InNamespace(workspace),
			client.MatchingLabels{targetLabel: "true"}, client.Limit(1000), client.Continue(cont)); err != nil {
			return "", err
		}
		for _, x := range cl.Items {
			if s := x.Status.Summary; !clusterOK(x.Name, s) {
				return fmt.Sprintf("cluster %s summary %d/%d Ready, %d WaitApplied", x.Name, s.Ready, s.DesiredReady, s.WaitApplied), nil
			}
		}
		if cont = cl.Continue; cont == "" {
			return "", nil
		}
	}
}
