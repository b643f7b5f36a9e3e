package helmop

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/summary"
)

// TestHandedOver: a Bundle of a HelmOp under an older name may go only
// once the Bundle named after the HelmOp has a BundleDeployment wherever
// the old one has, so the agent moves each release instead of
// uninstalling it, or once the Bundle controller has processed the new
// Bundle, created every deployment it wants and records no target error
// for a cluster left without one: a failed target is a cluster the new
// Bundle wants, where deleting the old one would uninstall the release.
func TestHandedOver(t *testing.T) {
	const ws = "fleet-default"
	ns := func(cluster string) string { return names.ClusterNamespace(ws, cluster) }
	// deps maps the clusters' namespaces to their deployments, the
	// clusters named as the Bundle controller's labels name them.
	deps := func(clusters ...string) map[string]deployment {
		m := map[string]deployment{}
		for _, c := range clusters {
			m[ns(c)] = deployment{Cluster: ws + "/" + c, State: fleet.Ready}
		}
		return m
	}
	// clusters are c1 … cn.
	clusters := func(n int) []string {
		var out []string
		for i := 1; i <= n; i++ {
			out = append(out, fmt.Sprintf("c%d", i))
		}
		return out
	}
	// refused are deployments of the clusters the agent refuses to move
	// the release to while the old deployment lives (ErrApplied).
	refused := func(clusters ...string) map[string]deployment {
		m := deps(clusters...)
		for k, d := range m {
			d.State = fleet.ErrApplied
			m[k] = d
		}
		return m
	}
	type opt func(*fleet.Bundle)
	bundle := func(gen, observed int64, newly, maxNew int, opts ...opt) *fleet.Bundle {
		b := &fleet.Bundle{
			ObjectMeta: metav1.ObjectMeta{Name: "my.app", Generation: gen},
			Status:     fleet.BundleStatus{ObservedGeneration: observed, NewlyCreated: newly, MaxNew: maxNew},
		}
		for _, o := range opts {
			o(b)
		}
		return b
	}
	// failedIn lists clusters in error as the Bundle controller does.
	failedIn := func(clusters ...string) opt {
		return func(b *fleet.Bundle) {
			for _, c := range clusters {
				b.Status.Summary.ErrApplied++
				b.Status.Summary.NonReadyResources = append(b.Status.Summary.NonReadyResources,
					fleet.NonReadyResource{Name: ws + "/" + c, State: fleet.ErrApplied, Message: "template: values: map has no entry for key \"region\""})
			}
		}
	}
	unlisted := func(n int) opt { return func(b *fleet.Bundle) { b.Status.Summary.ErrApplied += n } }
	// erring counts the clusters ErrApplied as the Bundle controller
	// counts a refused deployment or a failed target, listing only those
	// that fit (summary.MaxNonReadyResources), deployments first.
	erring := func(clusters ...string) opt {
		return func(b *fleet.Bundle) {
			for _, c := range clusters {
				summary.Increment(&b.Status.Summary, ws+"/"+c, fleet.ErrApplied, nil)
			}
		}
	}
	stalled := func(b *fleet.Bundle) {
		b.Status.Conditions = []metav1.Condition{{Type: fleet.ConditionStalled, Status: metav1.ConditionTrue, ObservedGeneration: b.Generation}}
	}
	unlabelled := map[string]deployment{ns("c2"): {}}
	for _, tc := range []struct {
		name     string
		old, cur map[string]deployment
		bundle   *fleet.Bundle
		want     bool
		why      string
	}{
		{name: "old deploys nowhere", old: deps(), cur: deps(), bundle: bundle(1, 0, 0, 0), want: true},
		{name: "every namespace covered", old: deps("c1", "c2"), cur: deps("c1", "c2", "c3"), bundle: bundle(1, 0, 0, 0), want: true},
		{name: "covered, even where the new one reports an error", old: deps("c1"), cur: deps("c1"), bundle: bundle(1, 1, 0, 50, failedIn("c1")), want: true},
		{name: "not processed yet", old: deps("c1"), cur: deps(), bundle: bundle(1, 0, 0, 0), why: "not processed"},
		{name: "older generation processed", old: deps("c1", "c2"), cur: deps("c1"), bundle: bundle(2, 1, 1, 50), why: "not processed"},
		{name: "more to create", old: deps("c1", "c2"), cur: deps("c1"), bundle: bundle(1, 1, 50, 50), why: "left to create"},
		{name: "rejected at its generation", old: deps("c1", "c2"), cur: deps("c1"), bundle: bundle(1, 1, 0, 50, stalled), why: "rejected"},
		// A rejection leaves observedGeneration behind: the status says
		// rejected, not waiting to be processed.
		{name: "rejected, observedGeneration behind", old: deps("c1"), cur: deps(), bundle: bundle(2, 1, 0, 50, stalled), why: "is rejected"},
		{name: "processed, c2 no target", old: deps("c1", "c2"), cur: deps("c1"), bundle: bundle(1, 1, 1, 50), want: true},
		{name: "failed target in c2", old: deps("c1", "c2"), cur: deps("c1"), bundle: bundle(1, 1, 1, 50, failedIn("c2")),
			why: "target error for cluster fleet-default/c2: template"},
		{name: "failed target in c2, deployment unlabelled", old: unlabelled, cur: deps(), bundle: bundle(1, 1, 0, 50, failedIn("c2")),
			why: "cluster fleet-default/c2"},
		{name: "failed target elsewhere, c2 no target", old: deps("c1", "c2"), cur: deps("c1"), bundle: bundle(1, 1, 1, 50, failedIn("c3")), want: true},
		{name: "errors the status does not list", old: deps("c1", "c2"), cur: deps("c1"), bundle: bundle(1, 1, 1, 50, failedIn("c3"), unlisted(1)),
			why: "does not list"},
		{name: "11 refused deployments fill the list, the 12th cluster no target", old: deps(clusters(12)...), cur: refused(clusters(11)...),
			bundle: bundle(1, 1, 11, 50, erring(clusters(11)...)), want: true},
		{name: "11 refused deployments fill the list, the 12th cluster's target failed unlisted", old: deps(clusters(12)...), cur: refused(clusters(11)...),
			bundle: bundle(1, 1, 11, 50, erring(clusters(11)...), erring("c12")), why: "does not list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := handedOver(tc.old, tc.cur, tc.bundle)
			if got != tc.want {
				t.Fatalf("handedOver = %v (%s), want %v", got, why, tc.want)
			}
			if !strings.Contains(why, tc.why) || (tc.why == "") != (why == "") {
				t.Fatalf("why = %q, want %q", why, tc.why)
			}
		})
	}
}

// TestHandedOverStableWhy: when several target errors speak for the same
// cluster namespace (here the deployment's labels name another cluster
// than its namespace's), the reason handedOver gives, which goes into the
// HelmOp's status, is the same on every look: the first cluster by name.
func TestHandedOverStableWhy(t *testing.T) {
	const ws = "fleet-default"
	old := map[string]deployment{names.ClusterNamespace(ws, "c2"): {Cluster: ws + "/c9", State: fleet.Ready}}
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Name: "my.app", Generation: 1},
		Status:     fleet.BundleStatus{ObservedGeneration: 1, NewlyCreated: 0, MaxNew: 50},
	}
	for _, c := range []string{"c9", "c2"} {
		b.Status.Summary.ErrApplied++
		b.Status.Summary.NonReadyResources = append(b.Status.Summary.NonReadyResources,
			fleet.NonReadyResource{Name: ws + "/" + c, State: fleet.ErrApplied, Message: "error in " + c})
	}
	const want = "bundle my.app has a target error for cluster fleet-default/c2: error in c2"
	for range 100 {
		if ok, why := handedOver(old, map[string]deployment{}, b); ok || why != want {
			t.Fatalf("handedOver = %v, %q; want false, %q", ok, why, want)
		}
	}
}
