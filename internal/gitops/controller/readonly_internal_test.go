package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestBundleStatusLeavesCachedObjectsAlone: bundleStatus hands
// summarizeBundles shallow copies of the informer cache's own objects (no
// deep copy), so the roll-up and the GitRepo status built from it must
// share nothing they could write through. Here the status is built as
// writeStatus does and then scribbled over, and the "cached" objects must
// still be as they were.
func TestBundleStatusLeavesCachedObjectsAlone(t *testing.T) {
	nonReady := func(name string) []fleet.NonReadyResource {
		return []fleet.NonReadyResource{{Name: name, State: fleet.NotReady, Message: "m",
			ModifiedStatus: []fleet.ModifiedStatus{{Kind: "ConfigMap", Name: "cm"}},
			NonReadyStatus: []fleet.NonReadyStatus{{Kind: "Deployment", Name: "d"}}}}
	}
	cachedBundles := []*fleet.Bundle{
		{ObjectMeta: metav1.ObjectMeta{Name: "z", Generation: 2, Labels: map[string]string{"a": "b"}},
			Status: fleet.BundleStatus{ObservedGeneration: 1, Summary: fleet.BundleSummary{NotReady: 1, DesiredReady: 1, NonReadyResources: nonReady("ws/c1")}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: 1},
			Status: fleet.BundleStatus{ObservedGeneration: 1, Summary: fleet.BundleSummary{ErrApplied: 1, DesiredReady: 1, NonReadyResources: nonReady("ws/c2")},
				Conditions: []metav1.Condition{
					{Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: "InvalidBundle", Message: "bad", ObservedGeneration: 1},
					{Type: fleet.ConditionStalled, Status: metav1.ConditionTrue, Reason: "InvalidBundle", Message: "bad", ObservedGeneration: 1},
				}}},
	}
	cachedBDs := []*fleet.BundleDeployment{
		{ObjectMeta: metav1.ObjectMeta{Name: "z", Namespace: "c1", Labels: map[string]string{fleet.ClusterNamespaceLabel: "ws", fleet.ClusterLabel: "c1"}},
			Status: fleet.BundleDeploymentStatus{ResourceCounts: fleet.ResourceCounts{Ready: 1, DesiredReady: 2, NotReady: 1}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "c2", Labels: map[string]string{fleet.ClusterNamespaceLabel: "ws", fleet.ClusterLabel: "c2"}},
			Status: fleet.BundleDeploymentStatus{ResourceCounts: fleet.ResourceCounts{Ready: 3, DesiredReady: 3}}},
	}
	var wantBundles []*fleet.Bundle
	var items []fleet.Bundle
	for _, b := range cachedBundles {
		wantBundles = append(wantBundles, b.DeepCopy())
		items = append(items, *b)
	}
	var wantBDs []*fleet.BundleDeployment
	for _, bd := range cachedBDs {
		wantBDs = append(wantBDs, bd.DeepCopy())
	}

	bs := summarizeBundles(items, cachedBDs)
	var st fleet.GitRepoStatus
	setBundleStatus(&st, bs)
	setConditions(&st, 1, syncOutcome{}, bs)
	if len(st.Summary.NonReadyResources) != 2 || len(st.PerClusterResourceCounts) != 2 {
		t.Fatalf("status %+v", st)
	}
	for i := range st.Summary.NonReadyResources {
		r := &st.Summary.NonReadyResources[i]
		r.Name, r.Message = "scribbled", "scribbled"
		r.ModifiedStatus[0].Name = "scribbled"
		r.NonReadyStatus[0].Name = "scribbled"
	}
	for _, c := range st.PerClusterResourceCounts {
		c.Ready = 99
	}
	for i := range st.Conditions {
		st.Conditions[i].Message = "scribbled"
	}
	for i, b := range cachedBundles {
		if !equality.Semantic.DeepEqual(b, wantBundles[i]) {
			t.Errorf("cached Bundle %s modified:\n%+v\nwant\n%+v", b.Name, b.Status, wantBundles[i].Status)
		}
	}
	for i, bd := range cachedBDs {
		if !equality.Semantic.DeepEqual(bd, wantBDs[i]) {
			t.Errorf("cached BundleDeployment %s modified", bd.Name)
		}
	}
}
