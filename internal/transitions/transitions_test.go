package transitions

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func bundleWith(s fleet.BundleSummary) *fleet.Bundle {
	return &fleet.Bundle{Status: fleet.BundleStatus{Summary: s}}
}

func TestBundleEvents(t *testing.T) {
	failing := fleet.BundleSummary{ErrApplied: 1, DesiredReady: 2, Ready: 1, NonReadyResources: []fleet.NonReadyResource{
		{Name: "c1", State: fleet.ErrApplied, Message: "chart render failed"}}}
	failingMore := failing
	failingMore.ErrApplied = 2
	ready := fleet.BundleSummary{Ready: 2, DesiredReady: 2}
	waiting := fleet.BundleSummary{Ready: 1, WaitApplied: 1, DesiredReady: 2}
	tests := []struct {
		name     string
		old, cur fleet.BundleSummary
		want     string
	}{
		{"starts failing", ready, failing, ReasonDeployFailed},
		{"still failing, more clusters", failing, failingMore, ""},
		{"recovers", failing, ready, ReasonDeployRecovered},
		{"rollout progress", waiting, ready, ""},
		{"no change", ready, ready, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BundleEvents(bundleWith(tt.old), bundleWith(tt.cur))
			if tt.want == "" {
				if len(got) != 0 {
					t.Fatalf("got %+v, want no event", got)
				}
				return
			}
			if len(got) != 1 || got[0].Reason != tt.want {
				t.Fatalf("got %+v, want one %s", got, tt.want)
			}
			if tt.want == ReasonDeployFailed && !strings.Contains(got[0].Message, "chart render failed") {
				t.Errorf("message %q does not say why", got[0].Message)
			}
			// A Bundle's entries are its clusters' deployments.
			if tt.want == ReasonDeployFailed && !strings.Contains(got[0].Message, "Cluster c1") {
				t.Errorf("message %q does not name the failing cluster as one", got[0].Message)
			}
		})
	}
}

func TestClusterEvents(t *testing.T) {
	seen := fleet.AgentStatus{LastSeen: metav1.Now()}
	offline := &fleet.Cluster{Status: fleet.ClusterStatus{Agent: seen, Conditions: []metav1.Condition{
		{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue, Reason: "AgentOffline", Message: "last seen 1h ago"}}}}
	online := &fleet.Cluster{Status: fleet.ClusterStatus{Agent: seen, Conditions: []metav1.Condition{
		{Type: fleet.ConditionOffline, Status: metav1.ConditionFalse, Reason: "Online"}}}}
	fresh := &fleet.Cluster{Status: fleet.ClusterStatus{Agent: seen}}
	neverSeen := &fleet.Cluster{Status: fleet.ClusterStatus{Conditions: offline.Status.Conditions}}
	// Checked in, but the roll-up still shows the wait for the first check-in.
	waitCheckIn := &fleet.Cluster{Status: fleet.ClusterStatus{Agent: seen, Conditions: []metav1.Condition{
		{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue, Reason: "WaitCheckIn"}}}}
	tests := []struct {
		name     string
		old, cur *fleet.Cluster
		want     string
	}{
		{"goes offline", online, offline, ReasonClusterOffline},
		{"condition appears offline", fresh, offline, ReasonClusterOffline},
		{"registered, never checked in", &fleet.Cluster{}, neverSeen, ""},
		{"first check-in", neverSeen, online, ""},
		{"first roll-up after a late first check-in", waitCheckIn, online, ""},
		{"comes back", offline, online, ReasonClusterOnline},
		{"condition removed", offline, fresh, ReasonClusterOnline},
		{"stays offline", offline, offline, ""},
		{"stays online", online, online, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ClusterEvents(tt.old, tt.cur)
			if tt.want == "" {
				if len(got) != 0 {
					t.Fatalf("got %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].Reason != tt.want {
				t.Fatalf("got %+v, want one %s", got, tt.want)
			}
		})
	}
	if got := ClusterEvents(online, offline); got[0].Message != "last seen 1h ago" {
		t.Errorf("offline message %q", got[0].Message)
	}
	if got := truncate(strings.Repeat("x", 5000)); len(got) != maxMessage {
		t.Errorf("truncate gave %d bytes", len(got))
	}
}
