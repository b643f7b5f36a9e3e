package registration

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStopState checks when the removal of the manager's agent stops
// waiting for what is left of it: only once every object left has been
// being deleted for longer than agentStopLimit, those not marked for
// deletion counting from when the removal first saw them (since).
func TestStopState(t *testing.T) {
	now := time.Now()
	at := func(ago time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-ago)} }
	cases := []struct {
		name     string
		deleting []*metav1.Time
		since    time.Duration // how long ago the removal first saw them
		want     agentLeft
	}{
		{name: "none left", want: agentGone},
		{name: "not deleted yet", deleting: []*metav1.Time{nil}, want: agentStopping},
		{name: "in its grace period", deleting: []*metav1.Time{at(-30 * time.Second)}, want: agentStopping},
		{name: "deleting for a while", deleting: []*metav1.Time{at(agentStopLimit - time.Second)}, want: agentStopping},
		{name: "stuck", deleting: []*metav1.Time{at(agentStopLimit)}, want: agentStuck},
		{name: "one stuck, one not deleted yet", deleting: []*metav1.Time{at(time.Hour), nil}, want: agentStopping},
		{name: "all stuck", deleting: []*metav1.Time{at(time.Hour), at(agentStopLimit + time.Minute)}, want: agentStuck},
		{name: "not marked, seen a while ago", deleting: []*metav1.Time{nil}, since: agentStopLimit - time.Second, want: agentStopping},
		{name: "never marked", deleting: []*metav1.Time{nil}, since: agentStopLimit, want: agentStuck},
		{name: "one stuck, one never marked", deleting: []*metav1.Time{at(time.Hour), nil}, since: time.Hour, want: agentStuck},
	}
	for _, tc := range cases {
		if got := stopState(tc.deleting, now.Add(-tc.since), now); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRemovalReport checks what Cluster local says, and how soon it looks
// again, at each stage of the removal of its agent.
func TestRemovalReport(t *testing.T) {
	cases := []struct {
		state   agentRemoval
		typ     string
		parts   []string
		not     []string // what the message must not claim
		recheck time.Duration
	}{
		{state: agentRemoval{}, typ: corev1.EventTypeNormal, parts: []string{"removed the one it had installed;"}},
		{state: agentRemoval{ns: "a", left: agentStopping}, typ: corev1.EventTypeNormal, recheck: agentStopRecheck,
			parts: []string{"namespace a", "still stopping"}},
		{state: agentRemoval{ns: "a", left: agentRunning}, typ: corev1.EventTypeWarning, recheck: agentHeldRecheck,
			parts: []string{"namespace a in place", "Deployment fleet-agent the manager did not make", "maybe with"},
			not:   []string{"runs there with its configuration and credential"}},
		{state: agentRemoval{ns: "a", left: agentStuck}, typ: corev1.EventTypeWarning, recheck: agentHeldRecheck,
			parts: []string{"is removing the one it had installed in namespace a", "more than 10m0s",
				"ConfigMap fleet-agent stays", "any credential it stored (Secret fleet-agent naming this Cluster)"},
			not: []string{"removed the one", "Secret a/fleet-agent"}},
	}
	for _, tc := range cases {
		typ, msg, recheck := removalReport(tc.state)
		if typ != tc.typ || recheck != tc.recheck {
			t.Errorf("%+v: got %s, recheck %v; want %s, %v", tc.state, typ, recheck, tc.typ, tc.recheck)
		}
		for _, p := range append(tc.parts, "bootstrap.localAgentDisabled is set", "its bundles are not deployed") {
			if !strings.Contains(msg, p) {
				t.Errorf("%+v: message %q lacks %q", tc.state, msg, p)
			}
		}
		for _, p := range tc.not {
			if strings.Contains(msg, p) {
				t.Errorf("%+v: message %q says %q", tc.state, msg, p)
			}
		}
	}
	// An AgentRemoved Event says a namespace's removal is done, never
	// beside a Warning that it is held.
	for _, tc := range []struct {
		removed bool
		left    agentLeft
		want    bool
	}{
		{removed: true, left: agentGone, want: true},
		{removed: false, left: agentGone},
		{removed: true, left: agentStuck},
		{removed: true, left: agentRunning},
		{removed: true, left: agentStopping},
	} {
		if got := removalDone(tc.removed, tc.left); got != tc.want {
			t.Errorf("removalDone(%v, %v): got %v, want %v", tc.removed, tc.left, got, tc.want)
		}
	}
}
