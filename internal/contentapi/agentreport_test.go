package contentapi_test

import (
	"encoding/json"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
)

// TestAgentReportApplyMatchesMergePatch: Apply (the first check-in, written
// with its Ready condition) sets on a Cluster's status exactly what the
// merge patch of every later check-in sets, including counts that fell to
// zero and node lists that emptied, and a check-in interval that a
// report no longer carries (an older agent: the manager's interval).
func TestAgentReportApplyMatchesMergePatch(t *testing.T) {
	before := fleet.ClusterStatus{Namespace: "cluster-ns",
		Agent: fleet.AgentStatus{LastSeen: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), Namespace: "old",
			ReadyNodes: 2, NonReadyNodes: 1, ReadyNodeNames: []string{"a", "b"}, NonReadyNodeNames: []string{"c"},
			CheckinInterval: &metav1.Duration{Duration: time.Hour}},
		Display: fleet.ClusterDisplay{ReadyNodes: "2/3", SampleNode: "a", ReadyBundles: "1/1"}}
	for _, tc := range []struct {
		name   string
		report contentapi.AgentReport
	}{
		{name: "nodes changed", report: contentapi.AgentReport{
			Agent: fleet.AgentStatus{LastSeen: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)), Namespace: "cattle-fleet-system",
				ReadyNodes: 3, ReadyNodeNames: []string{"a", "b", "d"}, CheckinInterval: &metav1.Duration{Duration: 5 * time.Second}},
			Display: contentapi.AgentDisplay{ReadyNodes: "3/3", SampleNode: "a"}}},
		{name: "everything fell to zero", report: contentapi.AgentReport{
			Agent:   fleet.AgentStatus{LastSeen: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))},
			Display: contentapi.AgentDisplay{ReadyNodes: "0/0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			applied := *before.DeepCopy()
			tc.report.Apply(&applied)

			doc, err := json.Marshal(map[string]any{"status": before})
			if err != nil {
				t.Fatal(err)
			}
			patch, err := tc.report.MergePatch()
			if err != nil {
				t.Fatal(err)
			}
			merged, err := jsonpatch.MergePatch(doc, patch)
			if err != nil {
				t.Fatal(err)
			}
			var patched struct {
				Status fleet.ClusterStatus `json:"status"`
			}
			if err := json.Unmarshal(merged, &patched); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(applied, patched.Status) {
				t.Errorf("Apply and MergePatch disagree:\napplied %+v\npatched %+v", applied, patched.Status)
			}
		})
	}
}
