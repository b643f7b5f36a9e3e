package target

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// badGroup is a ClusterGroup whose selector the API server accepts but
// that cannot be evaluated: operator In without values.
func badGroup(name string, lbls map[string]string) *fleet.ClusterGroup {
	g := group(name, lbls, map[string]string{"env": "prod"})
	g.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn}}
	return g
}

func TestGroupsOfReportsInvalidSelectors(t *testing.T) {
	unknownOp := group("unknown-op", nil, nil)
	unknownOp.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Near"}}}
	otherNS := badGroup("other", nil)
	otherNS.Namespace = "elsewhere"
	groups := []*fleet.ClusterGroup{group("prod", nil, map[string]string{"env": "prod"}), badGroup("bad", nil), unknownOp, otherNS, group("nil", nil, nil)}

	in, unknown := GroupsOf(cluster("a", withLabels("env", "prod")), groups)
	if len(in) != 1 || in[0].Name != "prod" {
		t.Fatalf("groups = %v, want [prod]", in)
	}
	var names []string
	for _, u := range unknown {
		names = append(names, u.Group.Name)
		if u.Err == nil || !strings.Contains(u.Error(), "ClusterGroup ws/"+u.Group.Name) {
			t.Errorf("unknown %s: error %q does not name the group", u.Group.Name, u.Error())
		}
	}
	if strings.Join(names, ",") != "bad,unknown-op" {
		t.Fatalf("unknown = %v, want bad and unknown-op (same namespace only)", names)
	}
}

func TestUnknownGroups(t *testing.T) {
	gold := map[string]string{"tier": "gold"}
	prodCluster := cluster("a", withLabels("env", "prod"))
	tests := []struct {
		name    string
		targets []fleet.BundleTarget
		restr   []fleet.BundleTargetRestriction
		parts   []fleet.Partition
		groups  []*fleet.ClusterGroup
		want    string // group named in the error, "" for none
	}{
		{name: "target names the invalid group", targets: []fleet.BundleTarget{{ClusterGroup: "bad"}},
			groups: []*fleet.ClusterGroup{badGroup("bad", nil)}, want: "bad"},
		{name: "group selector fits its labels", targets: []fleet.BundleTarget{{ClusterGroupSelector: &metav1.LabelSelector{MatchLabels: gold}}},
			groups: []*fleet.ClusterGroup{badGroup("bad", gold)}, want: "bad"},
		{name: "restriction names it", targets: []fleet.BundleTarget{{ClusterName: "a"}},
			restr: []fleet.BundleTargetRestriction{{ClusterGroup: "bad"}}, groups: []*fleet.ClusterGroup{badGroup("bad", nil)}, want: "bad"},
		{name: "partition names it", targets: []fleet.BundleTarget{{ClusterName: "a"}},
			parts: []fleet.Partition{{Name: "p", ClusterGroup: "bad"}}, groups: []*fleet.ClusterGroup{badGroup("bad", nil)}, want: "bad"},
		{name: "no group criteria", targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
			groups: []*fleet.ClusterGroup{badGroup("bad", nil)}},
		{name: "another group named", targets: []fleet.BundleTarget{{ClusterGroup: "prod"}},
			groups: []*fleet.ClusterGroup{group("prod", nil, map[string]string{"env": "prod"}), badGroup("bad", nil)}},
		{name: "group selector does not fit its labels", targets: []fleet.BundleTarget{{ClusterGroupSelector: &metav1.LabelSelector{MatchLabels: gold}}},
			groups: []*fleet.ClusterGroup{badGroup("bad", map[string]string{"tier": "silver"})}},
		{name: "cluster criteria already fail", targets: []fleet.BundleTarget{{ClusterGroup: "bad", ClusterName: "b"}},
			groups: []*fleet.ClusterGroup{badGroup("bad", nil)}},
		{name: "a valid group already matches", targets: []fleet.BundleTarget{{ClusterGroupSelector: &metav1.LabelSelector{MatchLabels: gold}}},
			groups: []*fleet.ClusterGroup{group("good", gold, map[string]string{"env": "prod"}), badGroup("bad", gold)}},
		{name: "no invalid group", targets: []fleet.BundleTarget{{ClusterGroup: "prod"}},
			groups: []*fleet.ClusterGroup{group("prod", nil, map[string]string{"env": "nope"})}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app"}}
			b.Spec.Targets, b.Spec.TargetRestrictions = tc.targets, tc.restr
			if tc.parts != nil {
				b.Spec.RolloutStrategy = &fleet.RolloutStrategy{Partitions: tc.parts}
			}
			err := UnknownGroups(b, infos(tc.groups, prodCluster))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var ue *UnknownGroupError
			if !errors.As(err, &ue) || ue.Group.Name != tc.want {
				t.Fatalf("error = %v, want an UnknownGroupError for %s", err, tc.want)
			}
			for _, s := range []string{"ClusterGroup ws/" + tc.want, "values set can't be empty", "cluster ws/a", "left as they are"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message %q lacks %q", err, s)
				}
			}
		})
	}
}

// A cluster that may belong to an invalid group makes the bundle
// re-evaluated on its changes (its stalled state may change with them).
func TestMatchAnyCountsUndecided(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app"}}
	b.Spec.Targets = []fleet.BundleTarget{{ClusterGroup: "bad"}}
	bm, err := NewBundleMatcher(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bm.MatchAny(infos([]*fleet.ClusterGroup{badGroup("bad", nil)}, cluster("a"))[0]) {
		t.Fatal("MatchAny = false for a cluster that may be in the invalid group")
	}
}
