package schedule

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// Err is set when the spec is invalid, or a ClusterGroup the
	// targeting depends on cannot be evaluated. An invalid spec changes
	// no cluster, and the clusters it matched before (Frozen) keep their
	// flags as they are unless a valid Schedule matches them. An invalid
	// ClusterGroup leaves the window in force: the clusters matched
	// regardless of it, and those whose targeting depends on it that
	// status.matchingClusters lists, follow the window (Matching); only
	// the unlisted ones that depend on it are frozen.
	Err *SpecError
	// Window is where now falls (valid Schedules, and those held up by
	// an invalid ClusterGroup).
	Window Window
	// Matching are the names of the clusters it targets, sorted. With an
	// invalid ClusterGroup: those matched regardless of the group plus
	// those it leaves undecided that status.matchingClusters lists (the
	// last known membership): a listed cluster left to its flags would
	// stay active, and deploy, after the window closes.
	Matching []string
	// Frozen are the clusters an invalid Schedule matched when it was last
	// valid (its status.matchingClusters); with an invalid ClusterGroup,
	// the clusters whose targeting depends on the group that it did not
	// list: this Schedule never flagged them, so it leaves them alone.
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
		out[i] = target.NewClusterInfo(&clusters[i], groups)
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
	var undecided []string
	if err == nil {
		e.Matching, undecided, err = matching(s, clusters)
	}
	if err != nil {
		var se *SpecError
		if !errors.As(err, &se) {
			se = &SpecError{Reason: ReasonInvalidSchedule, Err: err}
		}
		e.Err, e.Frozen = se, s.Status.MatchingClusters
		if se.Reason != ReasonInvalidClusterGroup {
			return e
		}
		// The window is known; only the membership is not. Clusters
		// listed before keep following the window (held back once it
		// closes); unlisted ones are left as they are.
		var held []string
		held, e.Frozen = splitListed(undecided, s.Status.MatchingClusters)
		e.Matching = append(e.Matching, held...)
		slices.Sort(e.Matching)
	}
	e.Window = timing.At(now)
	return e
}

// splitListed splits names into those listed contains and the others,
// keeping their order. A set, not a search per name: both lists can hold
// thousands of clusters.
func splitListed(names, listed []string) (in, out []string) {
	set := make(map[string]struct{}, len(listed))
	for _, n := range listed {
		set[n] = struct{}{}
	}
	for _, n := range names {
		if _, ok := set[n]; ok {
			in = append(in, n)
		} else {
			out = append(out, n)
		}
	}
	return in, out
}

// clusterList names up to three clusters (or groups) and counts the others.
func clusterList(names []string) string {
	const shown = 3
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s (and %d more)", strings.Join(names[:shown], ", "), len(names)-shown)
}

// validAtGeneration: this controller found the current spec generation
// valid (a Ready condition of Rancher Fleet has no observedGeneration
// and does not count). An invalid ClusterGroup is found only once the
// timing checks passed, so it counts as valid timing too: a broken group
// must not make an accepted Schedule face the overlap check again.
func validAtGeneration(s *fleet.Schedule) bool {
	c := FindCondition(s.Status.Conditions, fleet.ConditionReady)
	if c == nil || c.ObservedGeneration != s.Generation {
		return false
	}
	return (c.Status == metav1.ConditionTrue && c.Reason == ReasonValid) ||
		(c.Status == metav1.ConditionFalse && c.Reason == ReasonInvalidClusterGroup)
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
// of its set fields must match; an empty target matches nothing). It is
// an error (ReasonInvalidClusterGroup) when whether a cluster is
// targeted depends on a ClusterGroup whose selector cannot be evaluated.
func Matching(s *fleet.Schedule, clusters []target.ClusterInfo) ([]string, error) {
	names, _, err := matching(s, clusters)
	if err != nil {
		return nil, err
	}
	return names, nil
}

// matching is Matching that, on an invalid ClusterGroup, also returns the
// clusters matched regardless of it and, sorted, those whose targeting
// depends on one.
func matching(s *fleet.Schedule, clusters []target.ClusterInfo) (names, undecided []string, err error) {
	var matchers []*target.Matcher
	for i, t := range s.Spec.Targets.Clusters {
		m, err := target.NewMatcher(target.Criteria{ClusterName: t.ClusterName, ClusterSelector: t.ClusterSelector,
			ClusterGroup: t.ClusterGroup, ClusterGroupSelector: t.ClusterGroupSelector})
		if err != nil {
			name := t.Name
			if name == "" {
				name = fmt.Sprintf("#%d", i)
			}
			return nil, nil, &SpecError{Reason: ReasonInvalidTarget, Err: fmt.Errorf("spec.targets.clusters %s: %w", name, err)}
		}
		matchers = append(matchers, m)
	}
	var bad []*target.InvalidGroup
	for _, ci := range clusters {
		if ci.Cluster.Namespace != s.Namespace {
			continue
		}
		if slices.ContainsFunc(matchers, func(m *target.Matcher) bool { return m.Match(ci) }) {
			names = append(names, ci.Cluster.Name)
			continue
		}
		for _, m := range matchers {
			if g := m.Undecided(ci); g != nil {
				undecided = append(undecided, ci.Cluster.Name)
				bad = append(bad, g)
				break
			}
		}
	}
	slices.Sort(names)
	slices.Sort(undecided)
	if len(bad) > 0 {
		return names, undecided, invalidGroupError(bad, undecided)
	}
	return names, nil, nil
}

// invalidGroupError says which clusters wait for which groups. Each
// cluster depends on one of the groups, not necessarily on all, so the
// message names them apart and gives the error of the smallest name:
// clusters come in a cache's order, and the message must not change from
// one reconcile to the next.
func invalidGroupError(bad []*target.InvalidGroup, undecided []string) *SpecError {
	slices.SortFunc(bad, func(a, b *target.InvalidGroup) int { return strings.Compare(a.Group.Name, b.Group.Name) })
	bad = slices.CompactFunc(bad, func(a, b *target.InvalidGroup) bool { return a.Group.Name == b.Group.Name })
	first := *bad[0]
	detail := first.Error()
	if len(bad) > 1 {
		names := make([]string, len(bad))
		for i, g := range bad {
			names[i] = g.Group.Namespace + "/" + g.Group.Name
		}
		detail = fmt.Sprintf("one of %s; %v", clusterList(names), first)
	}
	return &SpecError{Reason: ReasonInvalidClusterGroup, Err: fmt.Errorf(
		"targeting of cluster(s) %s depends on an invalid ClusterGroup (%s); those listed in status.matchingClusters "+
			"follow the window, the others keep their flags until the group is fixed", clusterList(undecided), detail)}
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
// matched by a Schedule (valid, or held up by an invalid ClusterGroup:
// see Evaluation.Matching) is scheduled, and active while any of them
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
		}
		// An invalid spec matches nothing; an invalid ClusterGroup leaves
		// the matched and the listed clusters to the window.
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
// were) and sets Ready=False with the error. An invalid ClusterGroup sets
// Ready=False too, but the window is still followed: active,
// nextStartTime and matchingClusters are updated, the latter to the
// clusters matched now plus those it listed that the group leaves
// undecided (e.Matching: they follow the window too). Pure.
func ComputeStatus(s *fleet.Schedule, e Evaluation, now time.Time) fleet.ScheduleStatus {
	st := *s.Status.DeepCopy()
	cond := fleet.ScheduleCondition{Type: fleet.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonValid,
		ObservedGeneration: s.Generation, LastTransitionTime: metav1.NewTime(now.UTC().Truncate(time.Second))}
	if e.Err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, e.Err.Reason, e.Err.Error()
	}
	if e.Err == nil || e.Err.Reason == ReasonInvalidClusterGroup {
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
