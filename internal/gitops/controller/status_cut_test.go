package controller

import (
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// TestConditionMessagesCut: however long the Bundles' messages the
// GitRepo quotes (each up to the CRD's 32768 bytes), every condition
// message and the display message stay within summary.MaxConditionMessage
// and say they were cut, so the API server accepts the status.
func TestConditionMessagesCut(t *testing.T) {
	long := strings.Repeat("x", 32768)
	var failed []failedBundle
	var nonReady []fleet.NonReadyResource
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		failed = append(failed, failedBundle{Name: name, Reason: "InvalidBundle", Message: long})
		nonReady = append(nonReady, fleet.NonReadyResource{Name: name, State: fleet.ErrApplied, Message: long})
	}
	for name, bs := range map[string]bundleStatus{
		"rejected bundles": {Failed: failed},
		"not ready, warnings": {Summary: fleet.BundleSummary{DesiredReady: 5, ErrApplied: 5, NonReadyResources: nonReady},
			Warnings: long + long + long},
		"ready, warnings": {Warnings: long + long + long},
	} {
		t.Run(name, func(t *testing.T) {
			var st fleet.GitRepoStatus
			setConditions(&st, 1, syncOutcome{}, bs)
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
