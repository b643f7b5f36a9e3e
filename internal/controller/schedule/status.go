package schedule

import (
	"errors"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// Evaluation is one Schedule's answer at one moment. Pure data, built by
// Evaluate.
type Evaluation struct {
	// Name of the Schedule.
	Name string
	// Err is set when the spec is invalid; the Schedule then changes no
	// cluster, and the clusters it matched before (Frozen) keep their
	// flags as they are unless a valid Schedule matches them.
	Err *SpecError
	// Window is where now falls (valid Schedules only).
	Window Window
	// Matching are the names of the clusters it targets, sorted (valid
	// Schedules only).
	Matching []string
	// Frozen are the clusters an invalid Schedule matched when it was last
	// valid (its status.matchingClusters).
	Frozen []string
	// Retry is when an invalid Schedule is worth evaluating again before
	// maxWait: the next start, for windows refused as overlapping (the
	// gap between the next two starts changes with the date).
	Retry time.Time
}

// ClusterInfos pairs each cluster with its ClusterGroups, once per pass:
// every Schedule of the namespace matches against the same answer.
func ClusterInfos(clusters []fleet.Cluster, groups []*fleet.ClusterGroup) []target.ClusterInfo {
	out := make([]target.ClusterInfo, len(clusters))
	for i := range clusters {
		out[i] = target.ClusterInfo{Cluster: &clusters[i], Groups: target.GroupsOf(&clusters[i], groups)}
	}
	return out
}

// Evaluate computes s at now against the clusters of its namespace.
// Windows that would overlap are refused only for a spec generation not
// yet found valid (see CheckOverlap): the gap between two starts changes
// with the date, and a Schedule that was accepted must not start holding
// its clusters months later. Pure.
func Evaluate(s *fleet.Schedule, clusters []target.ClusterInfo, now time.Time) Evaluation {
	e := Evaluation{Name: s.Name}
	timing, err := ParseTiming(s.Spec, now)
	if err == nil && !validAtGeneration(s) {
		if err = timing.CheckOverlap(now); err != nil {
			e.Retry = timing.At(now).NextStart
		}
	}
	if err == nil {
		e.Matching, err = Matching(s, clusters)
	}
	if err != nil {
		var se *SpecError
		if !errors.As(err, &se) {
			se = &SpecError{Reason: ReasonInvalidSchedule, Err: err}
		}
		e.Err, e.Frozen = se, s.Status.MatchingClusters
		return e
	}
	e.Window = timing.At(now)
	return e
}

// validAtGeneration: this controller found the current spec generation
// valid (a Ready condition of Rancher Fleet has no observedGeneration
// and does not count).
func validAtGeneration(s *fleet.Schedule) bool {
	c := FindCondition(s.Status.Conditions, fleet.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonValid && c.ObservedGeneration == s.Generation
}

// FindCondition returns the condition of type t, or nil.
func FindCondition(conds []fleet.ScheduleCondition, t string) *fleet.ScheduleCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// Matching returns the sorted names of the clusters s targets: those
// matching any of its targets, each target as a GitRepo target does (all
// of its set fields must match; an empty target matches nothing).
func Matching(s *fleet.Schedule, clusters []target.ClusterInfo) ([]string, error) {
	var matchers []*target.Matcher
	for i, t := range s.Spec.Targets.Clusters {
		m, err := target.NewMatcher(target.Criteria{ClusterName: t.ClusterName, ClusterSelector: t.ClusterSelector,
			ClusterGroup: t.ClusterGroup, ClusterGroupSelector: t.ClusterGroupSelector})
		if err != nil {
			name := t.Name
			if name == "" {
				name = fmt.Sprintf("#%d", i)
			}
			return nil, &SpecError{Reason: ReasonInvalidTarget, Err: fmt.Errorf("spec.targets.clusters %s: %w", name, err)}
		}
		matchers = append(matchers, m)
	}
	var names []string
	for _, ci := range clusters {
		if ci.Cluster.Namespace != s.Namespace {
			continue
		}
		if slices.ContainsFunc(matchers, func(m *target.Matcher) bool { return m.Match(ci) }) {
			names = append(names, ci.Cluster.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Flags are the Schedule fields of a Cluster's status.
type Flags struct {
	Scheduled bool
	Active    bool
}

// FlagsOf reads a cluster's flags.
func FlagsOf(c *fleet.Cluster) Flags {
	return Flags{Scheduled: c.Status.Scheduled, Active: c.Status.ActiveSchedule}
}

// DesiredFlags decides the flags of every cluster of a namespace from the
// evaluations of all of its Schedules (deleted ones left out). A cluster
// matched by a valid Schedule is scheduled, and active while any of them
// has a window open (windows of several Schedules add up); one matched by
// none is neither. A cluster a remaining invalid Schedule froze and no
// valid one matches is left out of the answer: nothing is written to it,
// not even when a Schedule that had it is deleted, until the invalid
// Schedule is fixed or deleted. A deleted Schedule freezes nothing: it is
// not evaluated. Pure.
func DesiredFlags(evals []Evaluation, clusters []fleet.Cluster) map[string]Flags {
	frozen := map[string]bool{}
	want := map[string]Flags{}
	for _, e := range evals {
		if e.Err != nil {
			for _, n := range e.Frozen {
				frozen[n] = true
			}
			continue
		}
		for _, n := range e.Matching {
			f := want[n]
			f.Scheduled, f.Active = true, f.Active || e.Window.Active
			want[n] = f
		}
	}
	out := make(map[string]Flags, len(clusters))
	for i := range clusters {
		n := clusters[i].Name
		if f, ok := want[n]; ok || !frozen[n] {
			out[n] = f
		}
	}
	return out
}

// Writes are the flag patches of one pass: every cluster of want whose
// flags, as the cache shows them, differ, and every cluster of want in
// forced (the clusters of Schedules being deleted) whatever the cache
// shows, so that a lagging cache cannot leave a deleted Schedule's flags
// behind. Clusters want leaves out get nothing, forced or not: a
// remaining invalid Schedule froze them, and clearing them would deploy
// outside its windows. A deleted Schedule is not evaluated, so its own
// freeze counts for nothing. Pure.
func Writes(want map[string]Flags, clusters []fleet.Cluster, forced []string) map[string]Flags {
	out := map[string]Flags{}
	for i := range clusters {
		c := &clusters[i]
		if f, ok := want[c.Name]; ok && (f != FlagsOf(c) || slices.Contains(forced, c.Name)) {
			out[c.Name] = f
		}
	}
	return out
}

// ComputeStatus is the status s should have given its evaluation e at
// now. An invalid spec keeps the last valid active, nextStartTime and
// matchingClusters (they describe the cluster flags, which stay as they
// were) and sets Ready=False with the error. Pure.
func ComputeStatus(s *fleet.Schedule, e Evaluation, now time.Time) fleet.ScheduleStatus {
	st := *s.Status.DeepCopy()
	cond := fleet.ScheduleCondition{Type: fleet.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonValid,
		ObservedGeneration: s.Generation, LastTransitionTime: metav1.NewTime(now.UTC().Truncate(time.Second))}
	if e.Err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, e.Err.Reason, e.Err.Error()
	} else {
		st.Active = e.Window.Active
		st.NextStartTime = metav1.Time{}
		if !e.Window.NextStart.IsZero() {
			st.NextStartTime = metav1.NewTime(e.Window.NextStart.UTC())
		}
		st.MatchingClusters = e.Matching
	}
	// Ready is the only condition, rebuilt each time: the wrangler
	// conditions of a Schedule Rancher Fleet last wrote (Reconciling,
	// lastUpdateTime) do not describe what this controller did.
	if prev := FindCondition(s.Status.Conditions, fleet.ConditionReady); prev != nil &&
		prev.Status == cond.Status && !prev.LastTransitionTime.IsZero() {
		cond.LastTransitionTime = prev.LastTransitionTime
	}
	st.Conditions = []fleet.ScheduleCondition{cond}
	return st
}
