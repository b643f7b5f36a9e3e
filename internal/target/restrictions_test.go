package target

import (
	"reflect"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestNamespaceSelectorsCombine: with several GitRepoRestrictions in a
// namespace, a downstream namespace must match the
// allowedTargetNamespaceSelector of every one of them, as in Fleet. Using
// only one of them let a bundle deploy where another restriction forbids.
func TestNamespaceSelectorsCombine(t *testing.T) {
	restriction := func(name string, s *metav1.LabelSelector) *fleet.GitRepoRestriction {
		return &fleet.GitRepoRestriction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws"}, AllowedTargetNamespaceSelector: s}
	}
	expr := func(key string, op metav1.LabelSelectorOperator, vals ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: vals}}}
	}
	type nsCase struct {
		labels  map[string]string
		allowed bool
	}
	cases := []struct {
		name         string
		restrictions []*fleet.GitRepoRestriction
		namespaces   []nsCase
	}{
		{
			name:         "labels of both restrictions required",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", sel("team", "a")), restriction("b", sel("env", "prod"))},
			namespaces: []nsCase{
				{labels: map[string]string{"team": "a"}, allowed: false},
				{labels: map[string]string{"env": "prod"}, allowed: false},
				{labels: map[string]string{"team": "a", "env": "prod"}, allowed: true},
			},
		},
		{
			name:         "expressions of both restrictions required",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", expr("team", metav1.LabelSelectorOpIn, "a", "b")), restriction("b", expr("env", metav1.LabelSelectorOpExists))},
			namespaces: []nsCase{
				{labels: map[string]string{"team": "b"}, allowed: false},
				{labels: map[string]string{"team": "b", "env": "dev"}, allowed: true},
				{labels: map[string]string{"team": "c", "env": "dev"}, allowed: false},
			},
		},
		{
			name:         "conflicting values allow no namespace",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", sel("team", "a")), restriction("b", sel("team", "b"))},
			namespaces: []nsCase{
				{labels: map[string]string{"team": "a"}, allowed: false},
				{labels: map[string]string{"team": "b"}, allowed: false},
			},
		},
		{
			name:         "restriction without selector adds nothing",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", nil), restriction("b", sel("team", "a"))},
			namespaces: []nsCase{
				{labels: map[string]string{"team": "a"}, allowed: true},
				{labels: map[string]string{"team": "b"}, allowed: false},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			selectorFor := func(rs []*fleet.GitRepoRestriction) *metav1.LabelSelector {
				b := bundle("", []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}, nil)
				got, err := Compute(Input{Bundle: b, ManifestID: "s-1", Clusters: infos(nil, cluster("a")), Restrictions: rs})
				if err != nil || len(got) != 1 || got[0].Err != nil {
					t.Fatalf("err=%v targets=%d", err, len(got))
				}
				return got[0].Options.AllowedTargetNamespaceSelector
			}
			merged := selectorFor(c.restrictions)
			// The order restrictions are listed in must not change the
			// selector (it is part of the deploymentID).
			rev := slices.Clone(c.restrictions)
			slices.Reverse(rev)
			if reversed := selectorFor(rev); !reflect.DeepEqual(merged, reversed) {
				t.Fatalf("selector depends on list order: %v vs %v", merged, reversed)
			}
			s, err := metav1.LabelSelectorAsSelector(merged)
			if err != nil {
				t.Fatal(err)
			}
			for _, ns := range c.namespaces {
				if got := s.Matches(labels.Set(ns.labels)); got != ns.allowed {
					t.Errorf("namespace %v allowed = %v, want %v (selector %v)", ns.labels, got, ns.allowed, s)
				}
			}
		})
	}
}
