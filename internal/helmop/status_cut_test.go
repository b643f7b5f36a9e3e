package helmop

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// TestConditionMessagesCut: however long what the HelmOp quotes (the
// Bundle's messages, which quote agents, a build error, the notes on kept
// Bundles), every condition message and the display message stay within
// summary.MaxConditionMessage and say they were cut, so the API server
// accepts the status.
func TestConditionMessagesCut(t *testing.T) {
	long := strings.Repeat("x", 32768)
	var nonReady []fleet.NonReadyResource
	var kept []keptBundle
	for i := range 5 {
		nonReady = append(nonReady, fleet.NonReadyResource{Name: fmt.Sprintf("ws/c%d", i), State: fleet.ErrApplied, Message: long})
		kept = append(kept, keptBundle{Name: fmt.Sprintf("old-%d", i), Why: long})
	}
	bundle := func(status metav1.ConditionStatus, s fleet.BundleSummary) *fleet.Bundle {
		return &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "my.app", Generation: 3},
			Status: fleet.BundleStatus{ObservedGeneration: 3, Summary: s, Conditions: []metav1.Condition{
				{Type: fleet.ConditionReady, Status: status, Reason: "R", Message: long}}}}
	}
	for _, tc := range []struct {
		name string
		o    outcome
		b    *fleet.Bundle
	}{
		{name: "build error, kept bundles", o: outcome{Err: errors.New(long), Kept: kept}},
		{name: "not ready", o: outcome{Built: true}, b: bundle(metav1.ConditionFalse, fleet.BundleSummary{DesiredReady: 5, ErrApplied: 5, NonReadyResources: nonReady})},
		{name: "ready with a warning, kept bundles", o: outcome{Built: true, Kept: kept}, b: bundle(metav1.ConditionTrue, fleet.BundleSummary{DesiredReady: 1, Ready: 1})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st fleet.HelmOpStatus
			computeStatus(&st, 3, tc.o, tc.b)
			for _, c := range st.Conditions {
				if len(c.Message) > summary.MaxConditionMessage {
					t.Errorf("%s message is %d bytes, want at most %d", c.Type, len(c.Message), summary.MaxConditionMessage)
				}
			}
			if m := st.Display.Message; len(m) > summary.MaxConditionMessage || !strings.HasSuffix(m, "(cut)") {
				t.Errorf("display message is %d bytes, ends %q; want at most %d, cut", len(m), m[max(0, len(m)-10):], summary.MaxConditionMessage)
			}
		})
	}
}
