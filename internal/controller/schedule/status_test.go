package schedule

import (
	"errors"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func cluster(name string, labels map[string]string) fleet.Cluster {
	return fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws", Labels: labels}}
}

func group(name string, labels, selector map[string]string) *fleet.ClusterGroup {
	return &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws", Labels: labels},
		Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: selector}}}
}

func withTargets(targets ...fleet.ScheduleTarget) *fleet.Schedule {
	return &fleet.Schedule{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ws"},
		Spec: fleet.ScheduleSpec{Schedule: "0 0 12 * * *", Duration: metav1.Duration{Duration: time.Hour}, Location: "UTC",
			Targets: fleet.ScheduleTargets{Clusters: targets}}}
}

// TestMatching: targets choose clusters of the Schedule's namespace as
// GitRepo targets do.
func TestMatching(t *testing.T) {
	clusters := []fleet.Cluster{
		cluster("dev1", map[string]string{"env": "dev", "region": "eu"}),
		cluster("dev2", map[string]string{"env": "dev", "region": "us"}),
		cluster("prod1", map[string]string{"env": "prod", "region": "eu"}),
		{ObjectMeta: metav1.ObjectMeta{Name: "dev-elsewhere", Namespace: "other", Labels: map[string]string{"env": "dev"}}},
	}
	groups := []*fleet.ClusterGroup{
		group("europe", map[string]string{"tier": "gold"}, map[string]string{"region": "eu"}),
		group("america", map[string]string{"tier": "silver"}, map[string]string{"region": "us"}),
	}
	sel := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	for _, tc := range []struct {
		name    string
		targets []fleet.ScheduleTarget
		want    []string
	}{
		{name: "clusterName", targets: []fleet.ScheduleTarget{{ClusterName: "prod1"}}, want: []string{"prod1"}},
		{name: "clusterSelector, same namespace only", targets: []fleet.ScheduleTarget{{ClusterSelector: sel("env", "dev")}}, want: []string{"dev1", "dev2"}},
		{name: "empty selector selects all", targets: []fleet.ScheduleTarget{{ClusterSelector: &metav1.LabelSelector{}}}, want: []string{"dev1", "dev2", "prod1"}},
		{name: "clusterGroup", targets: []fleet.ScheduleTarget{{ClusterGroup: "europe"}}, want: []string{"dev1", "prod1"}},
		{name: "clusterGroupSelector", targets: []fleet.ScheduleTarget{{ClusterGroupSelector: sel("tier", "silver")}}, want: []string{"dev2"}},
		{name: "fields of one target are ANDed", targets: []fleet.ScheduleTarget{{ClusterGroup: "europe", ClusterSelector: sel("env", "dev")}}, want: []string{"dev1"}},
		{name: "targets are ORed", targets: []fleet.ScheduleTarget{{ClusterName: "prod1"}, {ClusterGroup: "america"}}, want: []string{"dev2", "prod1"}},
		{name: "a target with only a name matches nothing", targets: []fleet.ScheduleTarget{{Name: "all"}}, want: nil},
		{name: "no targets", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Matching(withTargets(tc.targets...), ClusterInfos(clusters, groups))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	bad := withTargets(fleet.ScheduleTarget{Name: "broken", ClusterSelector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}}})
	_, err := Matching(bad, ClusterInfos(clusters, groups))
	var se *SpecError
	if !errors.As(err, &se) || se.Reason != ReasonInvalidTarget {
		t.Errorf("invalid selector: %v, want a %s error", err, ReasonInvalidTarget)
	}
}

// TestDesiredFlags: the flags of a namespace's clusters from all of its
// Schedules.
func TestDesiredFlags(t *testing.T) {
	clusters := []fleet.Cluster{cluster("a", nil), cluster("b", nil), cluster("c", nil), cluster("d", nil)}
	open := Evaluation{Name: "open", Matching: []string{"a"}, Window: Window{Active: true}}
	closed := Evaluation{Name: "closed", Matching: []string{"a", "b"}}
	invalid := Evaluation{Name: "invalid", Err: &SpecError{Reason: ReasonInvalidSchedule, Err: errors.New("bad")}, Frozen: []string{"c"}}
	invalidAB := Evaluation{Name: "invalid-ab", Err: &SpecError{Reason: ReasonInvalidSchedule, Err: errors.New("bad")}, Frozen: []string{"a", "b"}}
	for _, tc := range []struct {
		name  string
		evals []Evaluation
		want  map[string]Flags
	}{
		{name: "no Schedules clears every cluster", want: map[string]Flags{"a": {}, "b": {}, "c": {}, "d": {}}},
		{name: "an open window makes its clusters active", evals: []Evaluation{open},
			want: map[string]Flags{"a": {Scheduled: true, Active: true}, "b": {}, "c": {}, "d": {}}},
		{name: "outside its windows a cluster is scheduled, not active", evals: []Evaluation{closed},
			want: map[string]Flags{"a": {Scheduled: true}, "b": {Scheduled: true}, "c": {}, "d": {}}},
		{name: "windows of several Schedules add up", evals: []Evaluation{closed, open},
			want: map[string]Flags{"a": {Scheduled: true, Active: true}, "b": {Scheduled: true}, "c": {}, "d": {}}},
		{name: "an invalid Schedule leaves the clusters it matched as they are", evals: []Evaluation{closed, invalid},
			want: map[string]Flags{"a": {Scheduled: true}, "b": {Scheduled: true}, "d": {}}},
		{name: "a valid Schedule keeps working on clusters an invalid one froze", evals: []Evaluation{open, closed, invalidAB},
			want: map[string]Flags{"a": {Scheduled: true, Active: true}, "b": {Scheduled: true}, "c": {}, "d": {}}},
		{name: "only clusters no valid Schedule matches stay frozen", evals: []Evaluation{open, invalidAB, invalid},
			want: map[string]Flags{"a": {Scheduled: true, Active: true}, "d": {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DesiredFlags(tc.evals, clusters); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestComputeStatus: a valid Schedule shows its window, next start and
// clusters with Ready=True; an invalid one keeps them and shows the error.
func TestComputeStatus(t *testing.T) {
	now := at("2030-06-15T12:30:00Z")
	clusters := []fleet.Cluster{cluster("dev1", map[string]string{"env": "dev"}), cluster("prod1", map[string]string{"env": "prod"})}
	s := withTargets(fleet.ScheduleTarget{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}})
	s.Generation = 3

	st := ComputeStatus(s, Evaluate(s, ClusterInfos(clusters, nil), now), now)
	if !st.Active || !st.NextStartTime.Time.Equal(at("2030-06-16T12:00:00Z")) || !reflect.DeepEqual(st.MatchingClusters, []string{"dev1"}) {
		t.Errorf("valid: active %v, next %s, clusters %v", st.Active, st.NextStartTime.UTC(), st.MatchingClusters)
	}
	ready := FindCondition(st.Conditions, fleet.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != ReasonValid || ready.ObservedGeneration != 3 {
		t.Errorf("valid: Ready %+v", ready)
	}

	s.Status = st
	s.Spec.Schedule = "0 0 25 * * *"
	later := now.Add(time.Hour)
	bad := ComputeStatus(s, Evaluate(s, ClusterInfos(clusters, nil), later), later)
	if !bad.Active || !bad.NextStartTime.Equal(&st.NextStartTime) || !reflect.DeepEqual(bad.MatchingClusters, []string{"dev1"}) {
		t.Errorf("invalid: the last valid state must stay, got active %v, next %s, clusters %v", bad.Active, bad.NextStartTime.UTC(), bad.MatchingClusters)
	}
	ready = FindCondition(bad.Conditions, fleet.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != ReasonInvalidSchedule || ready.Message == "" ||
		!ready.LastTransitionTime.Time.Equal(later) {
		t.Errorf("invalid: Ready %+v", ready)
	}

	// A status Rancher Fleet wrote (wrangler conditions) becomes one valid
	// Ready condition.
	rancher := s.DeepCopy()
	rancher.Spec.Schedule = "0 0 12 * * *"
	rancher.Status.Conditions = []fleet.ScheduleCondition{{Type: "Ready", Status: metav1.ConditionTrue, LastUpdateTime: "2030-06-01T00:00:00Z"}, {Type: "Reconciling", Status: metav1.ConditionFalse}}
	conds := ComputeStatus(rancher, Evaluate(rancher, ClusterInfos(clusters, nil), later), later).Conditions
	if len(conds) != 1 || conds[0].Type != fleet.ConditionReady || conds[0].Reason != ReasonValid || !conds[0].LastTransitionTime.Time.Equal(later) {
		t.Errorf("from Rancher's conditions: %+v", conds)
	}

	// Unchanged, the condition keeps its transition time.
	s.Status = bad
	again := ComputeStatus(s, Evaluate(s, ClusterInfos(clusters, nil), later.Add(time.Minute)), later.Add(time.Minute))
	if !reflect.DeepEqual(again, bad) {
		t.Errorf("recomputing an unchanged invalid Schedule changed its status:\n%+v\n%+v", again, bad)
	}
}

// TestWrites: a pass writes the clusters whose cached flags differ from
// the wanted ones, and the clusters of Schedules being deleted whatever
// the cache shows; a cluster a remaining invalid Schedule froze gets
// nothing, even when a deleted Schedule had it (deleted Schedules are
// left out of the evaluations, so their own freeze counts for nothing).
func TestWrites(t *testing.T) {
	held := cluster("held", nil)
	held.Status.Scheduled = true
	clusters := []fleet.Cluster{cluster("clear", nil), held, cluster("forced", nil)}
	freezesHeld := Evaluation{Name: "invalid", Err: &SpecError{Reason: ReasonInvalidSchedule, Err: errors.New("bad")}, Frozen: []string{"held"}}
	for _, tc := range []struct {
		name   string
		evals  []Evaluation
		forced []string
		want   map[string]Flags
	}{
		{name: "only what differs", want: map[string]Flags{"held": {}}},
		{name: "a deleted Schedule's clusters are written even when the cache shows them clear", forced: []string{"forced", "held"},
			want: map[string]Flags{"held": {}, "forced": {}}},
		{name: "a deleted Schedule alone: its cluster is cleared", forced: []string{"held"},
			want: map[string]Flags{"held": {}}},
		{name: "a deleted Schedule's cluster a remaining invalid Schedule froze is not written", evals: []Evaluation{freezesHeld},
			forced: []string{"forced", "held"}, want: map[string]Flags{"forced": {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Writes(DesiredFlags(tc.evals, clusters), clusters, tc.forced); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEvaluateKeepsAValidGeneration: an overlap that appears with the
// date (the gap to next month's start) does not invalidate a spec
// generation found valid, while a new generation is checked by Rancher
// Fleet's rule.
func TestEvaluateKeepsAValidGeneration(t *testing.T) {
	s := withTargets(fleet.ScheduleTarget{ClusterName: "a"})
	s.Generation = 2
	// 1st of the month, 29 days: valid in June (next two starts 1 July
	// and 1 August, 31 days apart), refused in January (1 February and
	// 1 March, 28 days apart).
	s.Spec.Schedule, s.Spec.Duration.Duration = "0 0 0 1 * ?", 29*24*time.Hour
	june, january := at("2030-06-15T12:00:00Z"), at("2031-01-15T12:00:00Z")
	clusters := ClusterInfos([]fleet.Cluster{cluster("a", nil)}, nil)

	e := Evaluate(s, clusters, june)
	if e.Err != nil {
		t.Fatalf("June: %v", e.Err)
	}
	if e := Evaluate(s, clusters, january); e.Err == nil || e.Err.Reason != ReasonInvalidDuration {
		t.Errorf("January, never found valid: %+v, want %s", e.Err, ReasonInvalidDuration)
	}
	// Refused by date: looked at again just after the next start, when
	// the next two starts are 31 days apart and Rancher's rule accepts it.
	lastDay, feb1 := at("2031-01-31T12:00:00Z"), at("2031-02-01T00:00:00Z")
	if e := Evaluate(s, clusters, lastDay); e.Err == nil || !e.Retry.Equal(feb1) || wakeAfter(e, lastDay) <= feb1.Sub(lastDay) || wakeAfter(e, lastDay) > 13*time.Hour {
		t.Errorf("31 January: %v, retry at %s (wake after %s), want just after %s", e.Err, e.Retry, wakeAfter(e, lastDay), feb1)
	}
	if e := Evaluate(s, clusters, feb1.Add(time.Second)); e.Err != nil {
		t.Errorf("1 February: %v", e.Err)
	}
	s.Status = ComputeStatus(s, e, june)
	if e := Evaluate(s, clusters, january); e.Err != nil || !reflect.DeepEqual(e.Matching, []string{"a"}) {
		t.Errorf("January, generation found valid in June: %v %v", e.Err, e.Matching)
	}
	s.Generation = 3
	if e := Evaluate(s, clusters, january); e.Err == nil || e.Err.Reason != ReasonInvalidDuration {
		t.Errorf("January, a new generation: %+v, want %s", e.Err, ReasonInvalidDuration)
	}
}

// TestNewFailure: the Warning Event is recorded once per reason and
// generation, not when only the message changes.
func TestNewFailure(t *testing.T) {
	st := func(status metav1.ConditionStatus, reason, msg string, gen int64) fleet.ScheduleStatus {
		return fleet.ScheduleStatus{Conditions: []fleet.ScheduleCondition{{Type: fleet.ConditionReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen}}}
	}
	bad := st(metav1.ConditionFalse, ReasonInvalidDuration, "gap 28 days", 1)
	for _, tc := range []struct {
		name  string
		prev  fleet.ScheduleStatus
		event bool
	}{
		{name: "new failure", prev: st(metav1.ConditionTrue, ReasonValid, "", 1), event: true},
		{name: "first status", event: true},
		{name: "same reason and generation, other message", prev: st(metav1.ConditionFalse, ReasonInvalidDuration, "gap 30 days", 1)},
		{name: "other reason", prev: st(metav1.ConditionFalse, ReasonInvalidSchedule, "gap 28 days", 1), event: true},
		{name: "new generation", prev: st(metav1.ConditionFalse, ReasonInvalidDuration, "gap 28 days", 0), event: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newFailure(tc.prev, bad) != nil; got != tc.event {
				t.Errorf("event %v, want %v", got, tc.event)
			}
		})
	}
}

// TestReleasedClusters: disabled, a deleted Schedule clears the clusters
// its status lists, except those another Schedule not being deleted
// lists.
func TestReleasedClusters(t *testing.T) {
	listing := func(name string, deleting bool, clusters ...string) fleet.Schedule {
		s := fleet.Schedule{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws"}}
		if deleting {
			s.DeletionTimestamp = &metav1.Time{Time: at("2030-06-15T12:00:00Z")}
		}
		s.Status.MatchingClusters = clusters
		return s
	}
	deleted := listing("deleted", true, "a", "b", "c")
	for _, tc := range []struct {
		name   string
		others []fleet.Schedule
		want   []string
	}{
		{name: "alone", want: []string{"a", "b", "c"}},
		{name: "another lists b", others: []fleet.Schedule{listing("other", false, "b", "z")}, want: []string{"a", "c"}},
		{name: "another being deleted keeps nothing", others: []fleet.Schedule{listing("gone", true, "a")}, want: []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := append([]fleet.Schedule{deleted}, tc.others...)
			if got := releasedClusters(&deleted, all); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
