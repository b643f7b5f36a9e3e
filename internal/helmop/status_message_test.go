package helmop

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestReadyMessageNamesTheBundle: the Bundle's summary names clusters; the
// HelmOp's Ready message names the Bundle once per state and message
// (Rancher: "ErrApplied(2) [Bundle x: <message>]"): clusters failing alike
// show once, for other reasons each.
func TestReadyMessageNamesTheBundle(t *testing.T) {
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Name: "my-op", Generation: 2},
		Status: fleet.BundleStatus{ObservedGeneration: 2, Summary: fleet.BundleSummary{
			DesiredReady: 3, ErrApplied: 2, WaitApplied: 1,
			NonReadyResources: []fleet.NonReadyResource{
				{Name: "fleet-default/cluster-641d0a29d2b5", State: fleet.ErrApplied, Message: "render: bad template"},
				{Name: "fleet-default/cluster-2", State: fleet.ErrApplied, Message: "render: other"},
				{Name: "fleet-default/cluster-3", State: fleet.WaitApplied},
				{Name: "fleet-default/cluster-4", State: fleet.ErrApplied, Message: "render: bad template"},
			},
		}},
	}
	var st fleet.HelmOpStatus
	computeStatus(&st, 1, outcome{Built: true, Version: "1.0.0"}, b)
	want := "ErrApplied(2) [Bundle my-op: render: bad template; Bundle my-op: render: other]; WaitApplied(1) [Bundle my-op]"
	c := findCondition(st.Conditions, fleet.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Message != want {
		t.Fatalf("Ready = %+v\nwant message %q", c, want)
	}
	if st.Display.Message != want || st.Display.State != string(fleet.ErrApplied) {
		t.Errorf("display %+v", st.Display)
	}
	if len(st.Summary.NonReadyResources) != 3 || st.Summary.ErrApplied != 2 {
		t.Errorf("summary %+v", st.Summary)
	}
	if b.Status.Summary.NonReadyResources[0].Name != "fleet-default/cluster-641d0a29d2b5" {
		t.Errorf("the Bundle's summary was changed: %+v", b.Status.Summary.NonReadyResources)
	}
}
