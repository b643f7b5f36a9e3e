package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestReadyMessageRollsUpBundleWarnings: a ready Bundle whose Ready
// message carries a warning (a cluster whose agent could not delete stale
// downstreamResources copies) leaves the GitRepo Ready, and the GitRepo's
// Ready and display messages name the Bundle and its warning; next to a
// not-ready Bundle the warning follows the not-ready report.
func TestReadyMessageRollsUpBundleWarnings(t *testing.T) {
	const warning = "StaleCopiesNotDeleted(1) [Cluster fleet-default/c1: deployed, but copies of downstreamResources no longer listed could not be deleted (retried): forbidden]"
	warned := bundle("web", 1, 1, fleet.BundleSummary{Ready: 1, DesiredReady: 1})
	warned.Status.Conditions = []metav1.Condition{{Type: fleet.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", Message: warning}}
	notReady := bundle("db", 1, 1, fleet.BundleSummary{DesiredReady: 1, NotReady: 1,
		NonReadyResources: []fleet.NonReadyResource{{Name: "fleet-default/c2", State: fleet.NotReady}}})
	for _, tc := range []struct {
		name    string
		bundles []fleet.Bundle
		status  metav1.ConditionStatus
		want    string
	}{
		{name: "ready with a warning", bundles: []fleet.Bundle{warned}, status: metav1.ConditionTrue, want: "Bundle web: " + warning},
		{name: "after the not-ready report", bundles: []fleet.Bundle{warned, notReady}, status: metav1.ConditionFalse,
			want: "NotReady(1) [Bundle db]; Bundle web: " + warning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := summarizeBundles(tc.bundles, nil)
			var st fleet.GitRepoStatus
			setBundleStatus(&st, bs)
			setConditions(&st, 1, syncOutcome{}, bs)
			c := meta.FindStatusCondition(st.Conditions, fleet.ConditionReady)
			if c == nil || c.Status != tc.status || c.Message != tc.want {
				t.Fatalf("Ready = %+v\nwant %s %q", c, tc.status, tc.want)
			}
			if st.Display.Message != tc.want || st.Display.Error {
				t.Errorf("display %+v, want message %q", st.Display, tc.want)
			}
		})
	}
}
