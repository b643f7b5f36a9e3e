package bundle

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// TestMappedNamespaces: a mapping selector that cannot be evaluated is an
// error only where skipping the mapping could cost the bundle something:
// a matching bundleSelector with an invalid namespaceSelector, or an
// invalid bundleSelector while the bundle deploys to a Cluster of a
// namespace the mapping could select (atRisk; any namespace when the
// namespaceSelector is invalid too).
func TestMappedNamespaces(t *testing.T) {
	match := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Near"}}}
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app", Labels: map[string]string{"app": "x"}}}
	for _, tc := range []struct {
		name       string
		bsel, nsel *metav1.LabelSelector
		wantField  string // field named in the error, "" for none
		wantSel    bool
		// atRisk: the bundle deploys to a Cluster of a namespace the
		// selector passed to atRisk selects.
		atRisk bool
	}{
		{name: "selects", bsel: match("app", "x"), nsel: match("team", "t"), wantSel: true},
		{name: "does not select", bsel: match("app", "y"), nsel: match("team", "t")},
		{name: "a nil selector never matches", bsel: nil, nsel: bad},
		{name: "invalid bundleSelector, deployment in a selected namespace", bsel: bad, nsel: match("team", "t"), atRisk: true, wantField: "bundleSelector"},
		{name: "invalid bundleSelector, no deployment in a selected namespace", bsel: bad, nsel: match("team", "t")},
		{name: "invalid bundleSelector and namespaceSelector, deployment outside", bsel: bad, nsel: bad, atRisk: true, wantField: "bundleSelector"},
		{name: "invalid bundleSelector and namespaceSelector, no deployment outside", bsel: bad, nsel: bad},
		{name: "invalid namespaceSelector of a selecting mapping", bsel: match("app", "x"), nsel: bad, wantField: "namespaceSelector"},
		{name: "invalid namespaceSelector of another bundle's mapping", bsel: match("app", "y"), nsel: bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &fleet.BundleNamespaceMapping{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "m"}, BundleSelector: tc.bsel, NamespaceSelector: tc.nsel}
			atRisk := func(sel labels.Selector) (bool, error) {
				switch {
				case tc.nsel == bad && sel != nil:
					t.Errorf("asked with selector %v, want nil (any namespace) for an invalid namespaceSelector", sel)
				case tc.nsel != bad && (sel == nil || !sel.Matches(labels.Set{"team": "t"})):
					t.Errorf("asked with selector %v, want the namespaceSelector", sel)
				}
				return tc.atRisk, nil
			}
			sel, err := mappedNamespaces(m, b, atRisk)
			if tc.wantField == "" {
				if err != nil || (sel != nil) != tc.wantSel {
					t.Fatalf("selector %v, err %v; want selector %v, no error", sel, err, tc.wantSel)
				}
				if tc.wantSel && !sel.Matches(labels.Set{"team": "t"}) {
					t.Errorf("selector %v does not select the mapped namespace", sel)
				}
				return
			}
			var be *target.BundleError
			var me *MappingError
			if !errors.As(err, &be) || !errors.As(err, &me) || me.Field != tc.wantField ||
				!strings.Contains(err.Error(), "BundleNamespaceMapping ws/m: "+tc.wantField) {
				t.Fatalf("err %v, want a BundleError naming ws/m %s", err, tc.wantField)
			}
		})
	}
}

// TestSetTargetInputError: bad input found while gathering clusters stalls
// the bundle with a reason naming what is wrong; an API error leaves the
// status alone (it is retried).
func TestSetTargetInputError(t *testing.T) {
	g := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "prod"}}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "a"}}
	for _, tc := range []struct {
		name   string
		err    error
		reason string
	}{
		{name: "group", err: &target.BundleError{Err: &target.UnknownGroupError{InvalidGroup: target.InvalidGroup{Group: g, Err: errors.New("bad")}, Cluster: c}},
			reason: ReasonInvalidClusterGroup},
		{name: "mapping", err: &target.BundleError{Err: &MappingError{Namespace: "ws", Name: "m", Field: "bundleSelector", Err: errors.New("bad")}},
			reason: ReasonInvalidMapping},
		{name: "other bad input", err: &target.BundleError{Err: errors.New("bad")}, reason: ReasonInvalid},
		{name: "API error", err: errors.New("connection refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &fleet.Bundle{}
			setTargetInputError(b, tc.err)
			ready := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady)
			stalled := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionStalled)
			if tc.reason == "" {
				if ready != nil || stalled != nil {
					t.Fatalf("conditions set for an API error: %+v", b.Status.Conditions)
				}
				return
			}
			if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != tc.reason || ready.Message != tc.err.Error() ||
				stalled == nil || stalled.Reason != tc.reason {
				t.Fatalf("Ready %+v, Stalled %+v; want %s", ready, stalled, tc.reason)
			}
		})
	}
}
