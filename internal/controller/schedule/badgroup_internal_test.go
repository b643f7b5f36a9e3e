package schedule

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func badGroup(name string, labels map[string]string) *fleet.ClusterGroup {
	g := group(name, labels, map[string]string{"env": "prod"})
	g.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn}}
	return g
}

// TestEvaluateInvalidClusterGroup: a Schedule whose targeting depends on a
// ClusterGroup whose selector cannot be evaluated freezes the clusters it
// may have through the group and did not list; those it matches
// regardless of the group, and those it may have through the group that
// status.matchingClusters lists, follow its window (active at 12:30, not
// at 14:00); one that does not depend on the group is evaluated as usual.
func TestEvaluateInvalidClusterGroup(t *testing.T) {
	open, closed := at("2030-06-15T12:30:00Z"), at("2030-06-15T14:00:00Z")
	clusters := []fleet.Cluster{
		cluster("a", map[string]string{"env": "prod"}),
		cluster("b", map[string]string{"env": "prod", "pinned": "yes"}),
		cluster("c", map[string]string{"env": "dev"}),
	}
	groups := []*fleet.ClusterGroup{badGroup("bad", map[string]string{"tier": "gold"}), group("dev", nil, map[string]string{"env": "dev"})}
	for _, tc := range []struct {
		name       string
		targets    []fleet.ScheduleTarget
		had        []string
		wantErr    bool
		wantFrozen []string
		wantMatch  []string
		closed     bool // evaluate when the window is closed
	}{
		{name: "clusterGroup names it", targets: []fleet.ScheduleTarget{{ClusterGroup: "bad"}},
			had: []string{"old"}, wantErr: true, wantFrozen: []string{"a", "b", "c"}},
		{name: "clusterGroupSelector fits it; clusters matched otherwise or listed follow the window",
			targets: []fleet.ScheduleTarget{{ClusterGroupSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}, ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
				{ClusterName: "c"}},
			had: []string{"a", "c"}, wantErr: true, wantFrozen: []string{"b"}, wantMatch: []string{"a", "c"}},
		{name: "clusters matched otherwise or listed are inactive once the window closes", closed: true,
			targets: []fleet.ScheduleTarget{{ClusterGroup: "bad"}, {ClusterName: "c"}},
			had:     []string{"a", "c"}, wantErr: true, wantFrozen: []string{"b"}, wantMatch: []string{"a", "c"}},
		{name: "all listed: none frozen, all inactive once the window closes", closed: true,
			targets: []fleet.ScheduleTarget{{ClusterGroup: "bad"}},
			had:     []string{"c", "b", "a"}, wantErr: true, wantMatch: []string{"a", "b", "c"}},
		{name: "another group", targets: []fleet.ScheduleTarget{{ClusterGroup: "dev"}}, wantMatch: []string{"c"}},
		{name: "no group criteria", targets: []fleet.ScheduleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pinned": "yes"}}}}, wantMatch: []string{"b"}},
		{name: "cluster criteria decide without the group", targets: []fleet.ScheduleTarget{{ClusterGroup: "bad", ClusterName: "nope"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := withTargets(tc.targets...)
			s.Status.MatchingClusters = tc.had
			now := open
			if tc.closed {
				now = closed
			}
			e := Evaluate(s, ClusterInfos(clusters, groups), now)
			if !tc.wantErr {
				if e.Err != nil || !reflect.DeepEqual(e.Matching, tc.wantMatch) {
					t.Fatalf("err %v, matching %v; want none, %v", e.Err, e.Matching, tc.wantMatch)
				}
				return
			}
			if e.Err == nil || e.Err.Reason != ReasonInvalidClusterGroup || !strings.Contains(e.Err.Error(), "ClusterGroup ws/bad") ||
				!strings.Contains(e.Err.Error(), "values set can't be empty") {
				t.Fatalf("err %v, want %s naming ws/bad", e.Err, ReasonInvalidClusterGroup)
			}
			if !strings.Contains(e.Err.Error(), "targeting of cluster(s) a, b") {
				t.Errorf("err %v, want the clusters waiting for the group named", e.Err)
			}
			if !reflect.DeepEqual(e.Frozen, tc.wantFrozen) {
				t.Errorf("frozen %v, want %v", e.Frozen, tc.wantFrozen)
			}
			if !reflect.DeepEqual(e.Matching, tc.wantMatch) {
				t.Errorf("matching %v, want %v", e.Matching, tc.wantMatch)
			}
			want := DesiredFlags([]Evaluation{e}, clusters)
			for _, n := range tc.wantFrozen {
				if _, written := want[n]; written {
					t.Errorf("cluster %s would be written: %+v", n, want[n])
				}
			}
			for _, n := range tc.wantMatch {
				if f := (Flags{Scheduled: true, Active: !tc.closed}); want[n] != f {
					t.Errorf("cluster %s flags %+v, want %+v", n, want[n], f)
				}
			}
			st := ComputeStatus(s, e, now)
			if !reflect.DeepEqual(st.MatchingClusters, tc.wantMatch) {
				t.Errorf("status.matchingClusters %v, want %v", st.MatchingClusters, tc.wantMatch)
			}
			if st.Active != !tc.closed {
				t.Errorf("status.active %v, want %v", st.Active, !tc.closed)
			}
		})
	}
}

// TestInvalidClusterGroupKeepsAcceptedTiming: a Schedule accepted for its
// generation whose group breaks is not put through the overlap check
// again (the date may have moved so that it fails it), so fixing the
// group brings it back as it was.
func TestInvalidClusterGroupKeepsAcceptedTiming(t *testing.T) {
	s := withTargets(fleet.ScheduleTarget{ClusterGroup: "bad"})
	s.Generation = 2
	// 29 days from the 1st: accepted in June, refused in January.
	s.Spec.Schedule, s.Spec.Duration.Duration = "0 0 0 1 * ?", 29*24*time.Hour
	june, january := at("2030-06-15T12:00:00Z"), at("2031-01-15T12:00:00Z")
	ok := ClusterInfos([]fleet.Cluster{cluster("a", map[string]string{"env": "prod"})}, []*fleet.ClusterGroup{group("bad", nil, map[string]string{"env": "prod"})})
	broken := ClusterInfos([]fleet.Cluster{cluster("a", map[string]string{"env": "prod"})}, []*fleet.ClusterGroup{badGroup("bad", nil)})

	e := Evaluate(s, ok, june)
	if e.Err != nil {
		t.Fatalf("June: %v", e.Err)
	}
	s.Status = ComputeStatus(s, e, june)
	e = Evaluate(s, broken, june)
	if e.Err == nil || e.Err.Reason != ReasonInvalidClusterGroup {
		t.Fatalf("broken group: %v", e.Err)
	}
	s.Status = ComputeStatus(s, e, june)
	if !reflect.DeepEqual(s.Status.MatchingClusters, []string{"a"}) {
		t.Errorf("matchingClusters %v, want kept", s.Status.MatchingClusters)
	}
	if e := Evaluate(s, broken, january); e.Err == nil || e.Err.Reason != ReasonInvalidClusterGroup {
		t.Errorf("January, group still broken: %v, want %s", e.Err, ReasonInvalidClusterGroup)
	}
	if e := Evaluate(s, ok, january); e.Err != nil {
		t.Errorf("January, group fixed: %v, want the accepted timing", e.Err)
	}
}

// TestInvalidClusterGroupMessage: with two invalid groups, each deciding
// a different cluster, the message does not say that all the clusters
// depend on one group, and it is the same whatever order the cache
// gives the clusters in.
func TestInvalidClusterGroupMessage(t *testing.T) {
	clusters := []fleet.Cluster{
		cluster("a", map[string]string{"env": "prod"}),
		cluster("b", map[string]string{"env": "prod"}),
	}
	groups := []*fleet.ClusterGroup{badGroup("worse", nil), badGroup("bad", nil)}
	s := withTargets(fleet.ScheduleTarget{ClusterGroup: "worse", ClusterName: "b"}, fleet.ScheduleTarget{ClusterGroup: "bad", ClusterName: "a"})
	e := Evaluate(s, ClusterInfos(clusters, groups), at("2030-06-15T12:30:00Z"))
	if e.Err == nil || e.Err.Reason != ReasonInvalidClusterGroup {
		t.Fatalf("err %v, want %s", e.Err, ReasonInvalidClusterGroup)
	}
	msg := e.Err.Error()
	for _, want := range []string{"targeting of cluster(s) a, b depends on an invalid ClusterGroup",
		"one of ws/bad, ws/worse", "ClusterGroup ws/bad has a selector that cannot be evaluated: ", "values set can't be empty"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	slices.Reverse(clusters)
	slices.Reverse(groups)
	if again := Evaluate(s, ClusterInfos(clusters, groups), at("2030-06-15T12:31:00Z")); again.Err == nil || again.Err.Error() != msg {
		t.Errorf("message changed with the cache order: %v, was %q", again.Err, msg)
	}
}
