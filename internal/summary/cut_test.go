package summary

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// crdMessageMax is the CRD's cap on a condition message: a status write
// with a longer one is refused by the API server.
const crdMessageMax = 32768

// long is an agent message as long as the CRD lets an agent write it.
func long(c string) string { return strings.Repeat(c, crdMessageMax) }

// TestCut: a message is kept when it fits, else cut on a rune boundary
// and marked, never over the cap.
func TestCut(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		max       int
		want      string
	}{
		{name: "fits", msg: "hello", max: 10, want: "hello"},
		{name: "exact", msg: "0123456789", max: 10, want: "0123456789"},
		{name: "cut", msg: "0123456789abc", max: 10, want: "0123 (cut)"},
		// "é" is 2 bytes: byte 4 is in the middle of the third one.
		{name: "rune boundary", msg: "ééééééé", max: 10, want: "éé (cut)"},
		{name: "tiny cap", msg: "0123456789", max: 3, want: " (cut)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Cut(tc.msg, tc.max)
			if got != tc.want {
				t.Fatalf("Cut = %q, want %q", got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("Cut = %q is not valid UTF-8", got)
			}
		})
	}
}

// TestAgentMessagesCut: three agents writing the longest messages the CRD
// allows, or a reason per cluster, still make condition messages that the
// API server accepts.
func TestAgentMessagesCut(t *testing.T) {
	warned := func(reason, msg string) *fleet.BundleDeployment {
		return bd("a", "a", "a", true, true, metav1.Condition{Type: fleet.ConditionDeployed, Status: metav1.ConditionTrue, Reason: reason, Message: msg})
	}
	failed := func(msg string) *fleet.BundleDeployment {
		return bd("a", "a", "a", true, true, metav1.Condition{Type: fleet.ConditionDeployed, Status: metav1.ConditionFalse, Reason: "DeployError", Message: msg})
	}
	warnings := func(n int, reason func(i int) string) []Warning {
		var ws []Warning
		for i := range n {
			r, m, ok := DeploymentWarning(warned(reason(i), long("é")))
			if !ok {
				t.Fatalf("no warning")
			}
			ws = append(ws, Warning{Name: fmt.Sprintf("ws/c%d", i), Reason: r, Message: m})
		}
		return ws
	}
	errSummary := func(n int) fleet.BundleSummary {
		var s fleet.BundleSummary
		for i := range n {
			d := failed(long("x"))
			Increment(&s, fmt.Sprintf("ws/c%d", i), ReportedState(d), d)
		}
		return s
	}
	bundles := func(n int) []*fleet.Bundle {
		var out []*fleet.Bundle
		for i := range n {
			out = append(out, &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b%d", i)}, Status: fleet.BundleStatus{Conditions: []metav1.Condition{
				{Type: fleet.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", Message: long("w")}}}})
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		msg      string
		max      int
		contains string
	}{
		{name: "three long warnings, one reason", msg: WarningMessage("Cluster", warnings(3, func(int) string { return "StaleCopiesNotDeleted" })),
			max: 3*(MaxAgentMessage+40) + 40, contains: " (cut)]"},
		{name: "a reason per cluster", msg: WarningMessage("Cluster", warnings(50, func(i int) string { return fmt.Sprintf("Reason%02d", i) })),
			max: 5*(MaxAgentMessage+60) + 40, contains: "(and 45 more reasons)"},
		{name: "three long deploy errors", msg: ReadyMessage(errSummary(3), "Cluster"),
			max: 3*(MaxAgentMessage+40) + 40, contains: " (cut)"},
		{name: "three long Bundle warnings", msg: BundleWarnings(bundles(3)),
			max: 3*(maxBundleWarning+40) + 40, contains: " (cut)"},
		{name: "composed message capped", msg: ConditionMessage(JoinMessages(ReadyMessage(errSummary(10), "Cluster"), BundleWarnings(bundles(3)))),
			max: MaxConditionMessage, contains: " (cut)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.msg) > tc.max || len(tc.msg) > crdMessageMax {
				t.Fatalf("message is %d bytes, want at most %d", len(tc.msg), tc.max)
			}
			if !strings.Contains(tc.msg, tc.contains) {
				t.Fatalf("message does not say %q: %.300q", tc.contains, tc.msg)
			}
			if !utf8.ValidString(tc.msg) {
				t.Fatalf("message is not valid UTF-8")
			}
		})
	}
}
