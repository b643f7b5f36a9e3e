package summary

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// staleCopiesMsg is what the agent reports when copies of
// downstreamResources that left the list could not be deleted.
const staleCopiesMsg = "deployed, but copies of downstreamResources no longer listed could not be deleted (retried): secret app/creds: forbidden"

// TestDeploymentWarning: only a Deployed condition that is True with a
// message is a warning; a failed deploy is an error (ErrApplied), a plain
// success none.
func TestDeploymentWarning(t *testing.T) {
	deployed := func(status metav1.ConditionStatus, reason, msg string) *fleet.BundleDeployment {
		return bd("a", "a", "a", true, true, metav1.Condition{Type: fleet.ConditionDeployed, Status: status, Reason: reason, Message: msg})
	}
	for _, tc := range []struct {
		name        string
		bd          *fleet.BundleDeployment
		reason, msg string
		wantWarning bool
	}{
		{name: "stale copies", bd: deployed(metav1.ConditionTrue, "StaleCopiesNotDeleted", staleCopiesMsg),
			reason: "StaleCopiesNotDeleted", msg: staleCopiesMsg, wantWarning: true},
		{name: "deployed", bd: deployed(metav1.ConditionTrue, "Deployed", "")},
		{name: "deploy failed", bd: deployed(metav1.ConditionFalse, "DeployError", "render: boom")},
		{name: "no condition yet", bd: bd("a", "a", "", false, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg, ok := DeploymentWarning(tc.bd)
			if ok != tc.wantWarning || reason != tc.reason || msg != tc.msg {
				t.Fatalf("DeploymentWarning = %q, %q, %v; want %q, %q, %v", reason, msg, ok, tc.reason, tc.msg, tc.wantWarning)
			}
		})
	}
}

// TestWarningMessage: warnings are listed as Ready messages list states,
// by reason with a count, naming at most MaxWarningsShown clusters each.
func TestWarningMessage(t *testing.T) {
	w := func(name, reason string) Warning { return Warning{Name: name, Reason: reason, Message: "m-" + name} }
	for _, tc := range []struct {
		name string
		ws   []Warning
		want string
	}{
		{name: "none", want: ""},
		{name: "one", ws: []Warning{{Name: "ws/c1", Reason: "StaleCopiesNotDeleted", Message: staleCopiesMsg}},
			want: "StaleCopiesNotDeleted(1) [Cluster ws/c1: " + staleCopiesMsg + "]"},
		{name: "capped, counted", ws: []Warning{w("ws/c1", "R"), w("ws/c2", "R"), w("ws/c3", "R"), w("ws/c4", "R")},
			want: "R(4) [Cluster ws/c1: m-ws/c1; Cluster ws/c2: m-ws/c2; Cluster ws/c3: m-ws/c3]"},
		{name: "first by name, whatever the order", ws: []Warning{w("ws/c4", "R"), w("ws/c2", "R"), w("ws/c3", "R"), w("ws/c1", "R")},
			want: "R(4) [Cluster ws/c1: m-ws/c1; Cluster ws/c2: m-ws/c2; Cluster ws/c3: m-ws/c3]"},
		{name: "reasons sorted", ws: []Warning{w("ws/c1", "Zeta"), w("ws/c2", "Alpha")},
			want: "Alpha(1) [Cluster ws/c2: m-ws/c2]; Zeta(1) [Cluster ws/c1: m-ws/c1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WarningMessage("Cluster", tc.ws); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestBundleWarnings: an owner rolls up the warnings of its ready Bundles
// (Ready=True with a message), named by Bundle; a not-ready Bundle's
// message is its not-ready report, not a warning.
func TestBundleWarnings(t *testing.T) {
	b := func(name string, status metav1.ConditionStatus, msg string) *fleet.Bundle {
		return &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: fleet.BundleStatus{Conditions: []metav1.Condition{
			{Type: fleet.ConditionReady, Status: status, Reason: "R", Message: msg}}}}
	}
	for _, tc := range []struct {
		name    string
		bundles []*fleet.Bundle
		want    string
	}{
		{name: "ready without message", bundles: []*fleet.Bundle{b("a", "True", "")}, want: ""},
		{name: "not ready", bundles: []*fleet.Bundle{b("a", "False", "NotReady(1) [Cluster ws/c1]")}, want: ""},
		{name: "no condition", bundles: []*fleet.Bundle{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}, want: ""},
		{name: "sorted by bundle", bundles: []*fleet.Bundle{b("web", "True", "W(1) [Cluster ws/c1: x]"), b("db", "True", "W(1) [Cluster ws/c2: y]")},
			want: "Bundle db: W(1) [Cluster ws/c2: y]; Bundle web: W(1) [Cluster ws/c1: x]"},
		{name: "capped", bundles: []*fleet.Bundle{b("a", "True", "w"), b("b", "True", "w"), b("c", "True", "w"), b("d", "True", "w"), b("e", "True", "w")},
			want: "Bundle a: w; Bundle b: w; Bundle c: w (and 2 more)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BundleWarnings(tc.bundles); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	if got := JoinMessages("", "a", "", "b"); got != "a; b" {
		t.Errorf("JoinMessages = %q", got)
	}
	if strings.Contains(JoinMessages("", ""), ";") {
		t.Errorf("JoinMessages of nothing has a separator")
	}
}
