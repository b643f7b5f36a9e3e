package bundle

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Cluster status changes at every check-in: only a change of whether the
// cluster is off schedule may send its bundles through targeting.
func TestClusterTargetingChangedSchedule(t *testing.T) {
	cluster := func(scheduled, active bool) *fleet.Cluster {
		c := &fleet.Cluster{}
		c.Status.Namespace = "cluster-ns"
		c.Status.Scheduled, c.Status.ActiveSchedule = scheduled, active
		return c
	}
	heartbeat := cluster(true, false)
	heartbeat.Status.Agent.LastSeen = metav1.NewTime(time.Now())
	tests := []struct {
		name string
		o, n *fleet.Cluster
		want bool
	}{
		{"check-in only", cluster(true, false), heartbeat, false},
		{"window opens", cluster(true, false), cluster(true, true), true},
		{"window closes", cluster(true, true), cluster(true, false), true},
		{"schedule added outside a window", cluster(false, false), cluster(true, false), true},
		{"schedule removed outside a window", cluster(true, false), cluster(false, false), true},
		{"schedule added inside a window", cluster(false, false), cluster(true, true), false},
		{"stale active flag without schedule", cluster(false, true), cluster(false, false), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := clusterTargetingChanged(tc.o, tc.n); got != tc.want {
				t.Errorf("clusterTargetingChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
