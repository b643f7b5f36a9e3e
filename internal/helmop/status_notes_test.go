package helmop

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestStatusNotes: what is no failure but needs saying follows the Ready
// message and display message without changing Ready: a Bundle of an
// older name kept during the rename hand-over (named, with why, on any
// outcome), and the warnings of a ready Bundle (a cluster whose agent
// could not delete stale downstreamResources copies).
func TestStatusNotes(t *testing.T) {
	const warning = "StaleCopiesNotDeleted(1) [Cluster fleet-default/c1: deployed, but copies of downstreamResources no longer listed could not be deleted (retried): forbidden]"
	processed := func(ready, desired int, readyMsg string) *fleet.Bundle {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "my.app", Generation: 3},
			Status: fleet.BundleStatus{ObservedGeneration: 3, Summary: fleet.BundleSummary{Ready: ready, DesiredReady: desired, WaitApplied: desired - ready}}}
		status := metav1.ConditionTrue
		if ready != desired {
			status = metav1.ConditionFalse
		}
		b.Status.Conditions = []metav1.Condition{{Type: fleet.ConditionReady, Status: status, Reason: "R", Message: readyMsg}}
		return b
	}
	kept := []keptBundle{{Name: "my-app-deaa787f", Why: "bundle my.app has a target error for cluster fleet-default/down: no region"}}
	const keptMsg = "bundle my-app-deaa787f of an older name is kept until its deployments are taken over: bundle my.app has a target error for cluster fleet-default/down: no region"
	for _, tc := range []struct {
		name         string
		o            outcome
		b            *fleet.Bundle
		status       metav1.ConditionStatus
		reason, want string
	}{
		{name: "ready, nothing to say", o: outcome{Built: true}, b: processed(1, 1, ""), status: "True", reason: ReasonBundleReady, want: ""},
		{name: "ready bundle's warning", o: outcome{Built: true}, b: processed(1, 1, warning), status: "True", reason: ReasonBundleReady,
			want: "Bundle my.app: " + warning},
		{name: "kept while not ready", o: outcome{Built: true, Kept: kept}, b: processed(0, 1, "WaitApplied(1) [Cluster fleet-default/down]"),
			status: "False", reason: ReasonBundleNotReady, want: "WaitApplied(1); " + keptMsg},
		{name: "kept while ready, with a warning", o: outcome{Built: true, Kept: kept}, b: processed(1, 1, warning), status: "True", reason: ReasonBundleReady,
			want: "Bundle my.app: " + warning + "; " + keptMsg},
		{name: "kept after a failed build", o: outcome{Err: errors.New("chart not found"), Kept: []keptBundle{{Name: "my-app-deaa787f", Why: "bundle my.app is not written by this HelmOp (yet)"}}},
			status: "False", reason: ReasonBuildFailed,
			want: "chart not found; bundle my-app-deaa787f of an older name is kept until its deployments are taken over: bundle my.app is not written by this HelmOp (yet)"},
		{name: "kept bundles in name order", o: outcome{Built: true, Kept: []keptBundle{{Name: "z", Why: "w1"}, {Name: "a", Why: "w2"}}}, b: processed(1, 1, ""),
			status: "True", reason: ReasonBundleReady,
			want: "bundle a of an older name is kept until its deployments are taken over: w2; bundle z of an older name is kept until its deployments are taken over: w1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st fleet.HelmOpStatus
			computeStatus(&st, 1, tc.o, tc.b)
			c := findCondition(st.Conditions, fleet.ConditionReady)
			if c == nil || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.want {
				t.Fatalf("Ready = %+v\nwant %s %s %q", c, tc.status, tc.reason, tc.want)
			}
			if st.Display.Message != tc.want {
				t.Errorf("display message %q, want %q", st.Display.Message, tc.want)
			}
			if s := findCondition(st.Conditions, fleet.ConditionStalled); s == nil || s.Status != metav1.ConditionFalse {
				t.Errorf("stalled = %+v: a note is no failure", s)
			}
		})
	}
}
