package clusterstatus

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// States shown on Clusters besides the BundleStates.
const (
	StateWaitCheckIn = fleet.ClusterWaitCheckIn
	StateOffline     = "Offline"
)

// Condition reasons.
const (
	ReasonReady       = "Ready"
	ReasonNotReady    = "NotReady"
	ReasonOffline     = "AgentOffline"
	ReasonWaitCheckIn = fleet.ClusterWaitCheckIn
	ReasonOnline      = "AgentOnline"
	// ReasonInvalidSelector: a ClusterGroup's selector cannot be parsed,
	// so it selects no cluster until it is fixed.
	ReasonInvalidSelector = "InvalidSelector"
)

// maxNonReadyClusters caps the names listed on a ClusterGroup.
const maxNonReadyClusters = 10

// Liveness says whether a cluster's agent is checking in.
type Liveness struct {
	// Offline is true when the agent never checked in or not within the
	// threshold; such clusters do not count against rollouts.
	Offline bool
	// NeverSeen distinguishes WaitCheckIn from Offline.
	NeverSeen bool
	// NextCheck is when the cluster goes offline if it does not check in
	// again (zero when already offline).
	NextCheck time.Duration
}

// LivenessOf derives liveness from status.agent.lastSeen; threshold is the
// manager's Offline threshold (Options.OfflineThreshold), which
// OfflineAfter stretches for an agent that checks in less often.
func LivenessOf(c *fleet.Cluster, now time.Time, threshold time.Duration) Liveness {
	last := c.Status.Agent.LastSeen
	if last.IsZero() {
		return Liveness{Offline: true, NeverSeen: true}
	}
	deadline := last.Add(OfflineAfter(threshold, c.Status.Agent.CheckinInterval))
	if !now.Before(deadline) {
		return Liveness{Offline: true}
	}
	return Liveness{NextCheck: deadline.Sub(now)}
}

// missedCheckIns is how many check-in intervals a cluster may stay silent
// before it is Offline: the manager's threshold is as many of its own
// intervals (manager.Options.OfflineThreshold).
const missedCheckIns = 3

// OfflineAfter is how long after its last check-in a cluster is Offline:
// threshold, the manager's (3 × its agentCheckinInterval), or 3 × the
// interval the cluster's agent reports (status.agent.checkinInterval) if
// that is longer. So it is 3 × the longer of the two intervals: an agent
// installed with its own, longer interval (the fleet-agent chart's
// checkinInterval) does not flip Offline between its check-ins, and one
// that reports none (an older agent) or a shorter one gets the manager's.
// Pure.
func OfflineAfter(threshold time.Duration, reported *metav1.Duration) time.Duration {
	if reported == nil || reported.Duration <= 0 {
		return threshold
	}
	// An interval so long that 3 × it overflows never goes Offline anyway.
	if reported.Duration > math.MaxInt64/missedCheckIns {
		return math.MaxInt64
	}
	return max(threshold, missedCheckIns*reported.Duration)
}

// OwnedStatus is the part of ClusterStatus the targeting area owns
// (contract 2).
type OwnedStatus struct {
	Summary              fleet.BundleSummary
	ResourceCounts       fleet.ResourceCounts
	ReadyBundles         string
	State                string
	ReadyGitRepos        int
	DesiredReadyGitRepos int
	ReadyHelmOps         int
	DesiredReadyHelmOps  int
	Ready                metav1.Condition
	Offline              metav1.Condition
}

// ComputeClusterStatus summarises a cluster's BundleDeployments. Pure.
func ComputeClusterStatus(c *fleet.Cluster, bds []fleet.BundleDeployment, live Liveness) OwnedStatus {
	var out OwnedStatus
	// Origins (GitRepos, HelmOps) are counted ready here when all their
	// deployments on this cluster are.
	type origin struct{ ready, total int }
	count := func(m map[string]*origin, bd *fleet.BundleDeployment, name string, ready bool) {
		k := bd.Labels[fleet.BundleNamespaceLabel] + "/" + name
		if m[k] == nil {
			m[k] = &origin{}
		}
		m[k].total++
		if ready {
			m[k].ready++
		}
	}
	repos, helmOps := map[string]*origin{}, map[string]*origin{}
	sort.Slice(bds, func(i, j int) bool { return bds[i].Name < bds[j].Name })
	for i := range bds {
		bd := &bds[i]
		// The cluster's own liveness decides: a deployment's Offline mark
		// is stale once its agent has checked in again.
		state := summary.ReportedState(bd)
		if live.Offline {
			state = fleet.Offline
		}
		name := bd.Labels[fleet.BundleNamespaceLabel] + "/" + bd.Labels[fleet.BundleLabel]
		summary.Increment(&out.Summary, name, state, bd)
		out.ResourceCounts.Add(bd.Status.ResourceCounts)
		if rn := bd.Labels[fleet.RepoLabel]; rn != "" {
			count(repos, bd, rn, state == fleet.Ready)
		}
		if hn := bd.Labels[fleet.HelmOpLabel]; hn != "" {
			count(helmOps, bd, hn, state == fleet.Ready)
		}
	}
	for _, r := range repos {
		out.DesiredReadyGitRepos++
		if r.ready == r.total {
			out.ReadyGitRepos++
		}
	}
	for _, h := range helmOps {
		out.DesiredReadyHelmOps++
		if h.ready == h.total {
			out.ReadyHelmOps++
		}
	}
	out.ReadyBundles = summary.ReadyCount(out.Summary)
	out.State = string(summary.WorstState(out.Summary))
	out.Offline = metav1.Condition{Type: fleet.ConditionOffline, Status: metav1.ConditionFalse, Reason: ReasonOnline, ObservedGeneration: c.Generation}
	switch {
	case live.NeverSeen:
		out.State = StateWaitCheckIn
		out.Offline.Status, out.Offline.Reason, out.Offline.Message = metav1.ConditionTrue, ReasonWaitCheckIn, "the agent has not checked in yet"
	case live.Offline:
		out.State = StateOffline
		out.Offline.Status, out.Offline.Reason = metav1.ConditionTrue, ReasonOffline
		out.Offline.Message = fmt.Sprintf("the agent has not checked in since %s", c.Status.Agent.LastSeen.UTC().Format(time.RFC3339))
	}
	out.Ready = metav1.Condition{Type: fleet.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonReady, ObservedGeneration: c.Generation}
	if live.Offline {
		out.Ready.Status, out.Ready.Reason, out.Ready.Message = metav1.ConditionFalse, out.Offline.Reason, out.Offline.Message
	} else if !summary.IsReady(out.Summary) {
		out.Ready.Status, out.Ready.Reason, out.Ready.Message = metav1.ConditionFalse, ReasonNotReady, summary.ReadyMessage(out.Summary, "Bundle")
	}
	return out
}

// Apply writes the owned fields into a ClusterStatus.
func (o OwnedStatus) Apply(st *fleet.ClusterStatus) {
	st.Summary = o.Summary
	st.ResourceCounts = o.ResourceCounts
	st.Display.ReadyBundles = o.ReadyBundles
	st.Display.State = o.State
	st.ReadyGitRepos = o.ReadyGitRepos
	st.DesiredReadyGitRepos = o.DesiredReadyGitRepos
	st.ReadyHelmOps = o.ReadyHelmOps
	st.DesiredReadyHelmOps = o.DesiredReadyHelmOps
	meta.SetStatusCondition(&st.Conditions, o.Ready)
	meta.SetStatusCondition(&st.Conditions, o.Offline)
}

// ComputeGroupStatus summarises the clusters a group selects. Pure.
func ComputeGroupStatus(g *fleet.ClusterGroup, clusters []fleet.Cluster) fleet.ClusterGroupStatus {
	st := fleet.ClusterGroupStatus{Conditions: g.Status.Conditions}
	var sel labels.Selector
	if g.Spec.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(g.Spec.Selector)
		if err != nil {
			// Selecting nothing and reporting Ready would claim a healthy
			// empty group; no count is given until the selector is fixed.
			st.Display.State = "Error"
			st.Conditions = append([]metav1.Condition(nil), st.Conditions...)
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{
				Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonInvalidSelector,
				Message: "invalid selector: " + err.Error(), ObservedGeneration: g.Generation,
			})
			return st
		}
		sel = s
	}
	readyClusters := 0
	var nonReady []string
	if sel != nil {
		for i := range clusters {
			c := &clusters[i]
			if c.Namespace != g.Namespace || !sel.Matches(labels.Set(c.Labels)) {
				continue
			}
			st.ClusterCount++
			summary.Add(&st.Summary, c.Status.Summary)
			st.ResourceCounts.Add(c.Status.ResourceCounts)
			if meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConditionReady) {
				readyClusters++
			} else {
				nonReady = append(nonReady, c.Name)
			}
		}
	}
	sort.Strings(nonReady)
	st.NonReadyClusterCount = len(nonReady)
	if len(nonReady) > maxNonReadyClusters {
		nonReady = nonReady[:maxNonReadyClusters]
	}
	st.NonReadyClusters = nonReady
	st.Display.ReadyClusters = fmt.Sprintf("%d/%d", readyClusters, st.ClusterCount)
	st.Display.ReadyBundles = summary.ReadyCount(st.Summary)
	st.Display.State = string(summary.WorstState(st.Summary))
	cond := metav1.Condition{Type: fleet.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonReady, ObservedGeneration: g.Generation}
	if st.NonReadyClusterCount > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonNotReady
		cond.Message = fmt.Sprintf("%d of %d clusters not ready: %v", st.NonReadyClusterCount, st.ClusterCount, st.NonReadyClusters)
		if m := summary.ReadyMessage(st.Summary, "Bundle"); m != "" {
			cond.Message += "; " + m
		}
	}
	st.Conditions = append([]metav1.Condition(nil), st.Conditions...)
	meta.SetStatusCondition(&st.Conditions, cond)
	return st
}

// FirstCheckIn returns what writes the first check-in of a cluster's agent
// together with the status this package would write right after it: the
// content API, taking that check-in, calls it on the Cluster carrying the
// agent's report and writes both in one patch. Without it every
// registration cost one more Cluster status write (the check-in, then its
// Ready condition), a tenth of a registration's writes. Only the
// installation's unsharded replica, whose cache holds every
// BundleDeployment, may use it; the Cluster controller, seeing the same
// status computed, then writes nothing.
func FirstCheckIn(r client.Reader, opts Options) func(context.Context, *fleet.Cluster) error {
	opts.defaults()
	return func(ctx context.Context, c *fleet.Cluster) error {
		bds := &fleet.BundleDeploymentList{}
		if err := r.List(ctx, bds, client.InNamespace(c.Status.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		ComputeClusterStatus(c, bds.Items, LivenessOf(c, opts.Now(), opts.OfflineThreshold)).Apply(&c.Status)
		return nil
	}
}
