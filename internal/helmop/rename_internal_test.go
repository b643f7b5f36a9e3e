package helmop

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestHandedOver: a Bundle of a HelmOp under an older name may go only
// once the Bundle named after the HelmOp has a BundleDeployment wherever
// the old one has, so the agent moves each release instead of
// uninstalling it, or once the Bundle controller has processed the new
// Bundle and created every deployment it wants.
func TestHandedOver(t *testing.T) {
	set := func(ns ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range ns {
			m[n] = true
		}
		return m
	}
	bundle := func(gen, observed int64, newly, maxNew int) *fleet.Bundle {
		return &fleet.Bundle{
			ObjectMeta: metav1.ObjectMeta{Generation: gen},
			Status:     fleet.BundleStatus{ObservedGeneration: observed, NewlyCreated: newly, MaxNew: maxNew},
		}
	}
	for _, tc := range []struct {
		name     string
		old, cur map[string]bool
		bundle   *fleet.Bundle
		want     bool
	}{
		{name: "old deploys nowhere", old: set(), cur: set(), bundle: bundle(1, 0, 0, 0), want: true},
		{name: "every namespace covered", old: set("c1", "c2"), cur: set("c1", "c2", "c3"), bundle: bundle(1, 0, 0, 0), want: true},
		{name: "not processed yet", old: set("c1"), cur: set(), bundle: bundle(1, 0, 0, 0), want: false},
		{name: "older generation processed", old: set("c1", "c2"), cur: set("c1"), bundle: bundle(2, 1, 1, 50), want: false},
		{name: "more to create", old: set("c1", "c2"), cur: set("c1"), bundle: bundle(1, 1, 50, 50), want: false},
		{name: "processed, c2 no target", old: set("c1", "c2"), cur: set("c1"), bundle: bundle(1, 1, 1, 50), want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := handedOver(tc.old, tc.cur, tc.bundle); got != tc.want {
				t.Fatalf("handedOver = %v, want %v", got, tc.want)
			}
		})
	}
}
