package clusterstatus

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func TestLivenessOf(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	seen := func(ago time.Duration) *fleet.Cluster {
		c := &fleet.Cluster{}
		c.Status.Agent.LastSeen = metav1.NewTime(now.Add(-ago))
		return c
	}
	cases := []struct {
		name string
		c    *fleet.Cluster
		want Liveness
	}{
		{"never seen", &fleet.Cluster{}, Liveness{Offline: true, NeverSeen: true}},
		{"recent", seen(time.Minute), Liveness{NextCheck: 44 * time.Minute}},
		{"exactly at threshold", seen(45 * time.Minute), Liveness{Offline: true}},
		{"long gone", seen(5 * time.Hour), Liveness{Offline: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := LivenessOf(c.c, now, 45*time.Minute); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestOfflineAfter: a cluster is Offline after 3 × the longer of the
// manager's interval and the one its agent reports; an agent that reports
// none is held to the manager's.
func TestOfflineAfter(t *testing.T) {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	for _, tc := range []struct {
		name      string
		threshold time.Duration // the manager's: 3 × its interval
		reported  *metav1.Duration
		want      time.Duration
	}{
		{name: "older agent: the manager's", threshold: 45 * time.Minute, want: 45 * time.Minute},
		{name: "same interval", threshold: 45 * time.Minute, reported: d(15 * time.Minute), want: 45 * time.Minute},
		{name: "agent checks in less often than the manager's interval", threshold: 15 * time.Minute, reported: d(15 * time.Minute), want: 45 * time.Minute},
		{name: "agent chart at 1h, manager at 15m", threshold: 45 * time.Minute, reported: d(time.Hour), want: 3 * time.Hour},
		{name: "agent checks in more often: the manager's", threshold: 3 * time.Second, reported: d(time.Second), want: 3 * time.Second},
		{name: "zero reported: the manager's", threshold: 45 * time.Minute, reported: d(0), want: 45 * time.Minute},
		{name: "negative reported: the manager's", threshold: 45 * time.Minute, reported: d(-time.Hour), want: 45 * time.Minute},
		{name: "overflowing interval: never", threshold: 45 * time.Minute, reported: d(math.MaxInt64 / 2), want: math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OfflineAfter(tc.threshold, tc.reported); got != tc.want {
				t.Fatalf("OfflineAfter(%s, %v) = %s, want %s", tc.threshold, tc.reported, got, tc.want)
			}
		})
	}
}

// TestLivenessOfReportedInterval: the liveness of a cluster follows the
// interval its agent reports. With the manager at 5m (threshold 15m) and
// the agent at 15m, a cluster last seen 20 minutes ago is online, not
// Offline between two of its agent's check-ins.
func TestLivenessOfReportedInterval(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	seen := func(ago, interval time.Duration) *fleet.Cluster {
		c := &fleet.Cluster{}
		c.Status.Agent.LastSeen = metav1.NewTime(now.Add(-ago))
		if interval != 0 {
			c.Status.Agent.CheckinInterval = &metav1.Duration{Duration: interval}
		}
		return c
	}
	const threshold = 15 * time.Minute
	for _, tc := range []struct {
		name string
		c    *fleet.Cluster
		want Liveness
	}{
		{name: "agent at 15m, seen 20m ago", c: seen(20*time.Minute, 15*time.Minute), want: Liveness{NextCheck: 25 * time.Minute}},
		{name: "agent at 15m, seen 45m ago", c: seen(45*time.Minute, 15*time.Minute), want: Liveness{Offline: true}},
		{name: "older agent, seen 20m ago", c: seen(20*time.Minute, 0), want: Liveness{Offline: true}},
		{name: "agent at 1m, seen 10m ago", c: seen(10*time.Minute, time.Minute), want: Liveness{NextCheck: 5 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LivenessOf(tc.c, now, threshold); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func bd(bundle, repo string, ready bool, counts fleet.ResourceCounts) fleet.BundleDeployment {
	b := fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: bundle, Labels: map[string]string{fleet.BundleLabel: bundle, fleet.BundleNamespaceLabel: "ws"}}}
	if repo != "" {
		b.Labels[fleet.RepoLabel] = repo
	}
	b.Spec.DeploymentID, b.Spec.StagedDeploymentID = "id", "id"
	b.Status.AppliedDeploymentID, b.Status.Ready, b.Status.NonModified = "id", ready, true
	b.Status.ResourceCounts = counts
	return b
}

func TestComputeClusterStatus(t *testing.T) {
	c := &fleet.Cluster{}
	c.Status.Agent.LastSeen = metav1.Now()
	bds := []fleet.BundleDeployment{
		bd("a", "r1", true, fleet.ResourceCounts{Ready: 2, DesiredReady: 2}),
		bd("b", "r1", false, fleet.ResourceCounts{NotReady: 1, DesiredReady: 1}),
		bd("c", "r2", true, fleet.ResourceCounts{Ready: 1, DesiredReady: 1}),
		bd("d", "", true, fleet.ResourceCounts{}),
	}
	bds[3].Labels[fleet.HelmOpLabel] = "h1"
	cases := []struct {
		name      string
		live      Liveness
		state     string
		ready     string
		condReady metav1.ConditionStatus
		offline   metav1.ConditionStatus
		gitrepos  string
		helmops   string
	}{
		{"online", Liveness{NextCheck: time.Minute}, "NotReady", "3/4", metav1.ConditionFalse, metav1.ConditionFalse, "1/2", "1/1"},
		{"offline", Liveness{Offline: true}, "Offline", "0/4", metav1.ConditionFalse, metav1.ConditionTrue, "0/2", "0/1"},
		{"never checked in", Liveness{Offline: true, NeverSeen: true}, "WaitCheckIn", "0/4", metav1.ConditionFalse, metav1.ConditionTrue, "0/2", "0/1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ComputeClusterStatus(c, append([]fleet.BundleDeployment(nil), bds...), tc.live)
			if got.State != tc.state || got.ReadyBundles != tc.ready || got.Ready.Status != tc.condReady || got.Offline.Status != tc.offline ||
				fmt.Sprintf("%d/%d", got.ReadyGitRepos, got.DesiredReadyGitRepos) != tc.gitrepos {
				t.Fatalf("got state %s ready %s cond %s offline %s gitrepos %d/%d", got.State, got.ReadyBundles, got.Ready.Status, got.Offline.Status, got.ReadyGitRepos, got.DesiredReadyGitRepos)
			}
			if h := fmt.Sprintf("%d/%d", got.ReadyHelmOps, got.DesiredReadyHelmOps); h != tc.helmops {
				t.Fatalf("helmops %s, want %s", h, tc.helmops)
			}
			if got.ResourceCounts.Ready != 3 || got.ResourceCounts.DesiredReady != 4 {
				t.Fatalf("resource counts %+v", got.ResourceCounts)
			}
		})
	}
	all := ComputeClusterStatus(c, []fleet.BundleDeployment{bd("a", "", true, fleet.ResourceCounts{})}, Liveness{NextCheck: time.Minute})
	if all.State != "Ready" || all.Ready.Status != metav1.ConditionTrue || all.Ready.Message != "" {
		t.Fatalf("all ready: %+v", all)
	}
}

// TestComputeClusterStatusStaleOfflineMarks: the manager marks a cluster's
// deployments Offline while its agent is away (or not there yet). The
// first check-in is written with a status computed before the marks are
// removed: the cluster's liveness must decide, or a cluster that has just
// checked in shows Offline.
func TestComputeClusterStatusStaleOfflineMarks(t *testing.T) {
	c := &fleet.Cluster{}
	c.Status.Agent.LastSeen = metav1.Now()
	marked := func(b fleet.BundleDeployment) fleet.BundleDeployment {
		b.Status.Conditions = append(b.Status.Conditions,
			metav1.Condition{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue, Reason: "AgentOffline", Message: "the cluster's agent has not checked in yet"},
			metav1.Condition{Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: "NotReady", Message: "configmap x not ready"})
		return b
	}
	cases := []struct {
		name    string
		live    Liveness
		state   string
		ready   string
		message string
	}{
		{"back online: what the agent reported", Liveness{NextCheck: time.Minute}, "NotReady", "1/2", "configmap x not ready"},
		{"still offline: Offline", Liveness{Offline: true}, "Offline", "0/2", "the cluster's agent has not checked in yet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bds := []fleet.BundleDeployment{marked(bd("a", "", true, fleet.ResourceCounts{})), marked(bd("b", "", false, fleet.ResourceCounts{}))}
			got := ComputeClusterStatus(c, bds, tc.live)
			if got.State != tc.state || got.ReadyBundles != tc.ready {
				t.Fatalf("state %s, ready %s; want %s, %s", got.State, got.ReadyBundles, tc.state, tc.ready)
			}
			var msgs []string
			for _, r := range got.Summary.NonReadyResources {
				msgs = append(msgs, r.Message)
			}
			if len(msgs) == 0 || msgs[len(msgs)-1] != tc.message {
				t.Fatalf("non-ready messages %q, want the last to be %q", msgs, tc.message)
			}
		})
	}
}

func TestComputeGroupStatus(t *testing.T) {
	mk := func(name, env string, ready bool, s fleet.BundleSummary) fleet.Cluster {
		c := fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws", Labels: map[string]string{"env": env}}}
		st := metav1.ConditionFalse
		if ready {
			st = metav1.ConditionTrue
		}
		c.Status.Conditions = []metav1.Condition{{Type: fleet.ConditionReady, Status: st}}
		c.Status.Summary = s
		return c
	}
	var clusters []fleet.Cluster
	for i := 0; i < 15; i++ {
		clusters = append(clusters, mk(fmt.Sprintf("p%02d", i), "prod", i < 2, fleet.BundleSummary{Ready: 1, NotReady: 1, DesiredReady: 2}))
	}
	clusters = append(clusters, mk("d", "dev", true, fleet.BundleSummary{Ready: 5, DesiredReady: 5}))
	other := mk("elsewhere", "prod", true, fleet.BundleSummary{})
	other.Namespace = "other"
	clusters = append(clusters, other)
	g := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ws"}, Spec: fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}
	st := ComputeGroupStatus(g, clusters)
	if st.ClusterCount != 15 || st.NonReadyClusterCount != 13 || len(st.NonReadyClusters) != 10 || st.Display.ReadyClusters != "2/15" || st.Display.ReadyBundles != "15/30" {
		t.Fatalf("status %+v", st)
	}
	if st.Conditions[0].Status != metav1.ConditionFalse {
		t.Fatalf("condition %+v", st.Conditions)
	}
	empty := ComputeGroupStatus(&fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ws"}}, clusters)
	if empty.ClusterCount != 0 || empty.Display.ReadyClusters != "0/0" {
		t.Fatalf("nil selector must match nothing: %+v", empty)
	}
}

func TestComputeGroupStatusInvalidSelector(t *testing.T) {
	c := fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ws", Labels: map[string]string{"env": "prod"}}}
	c.Status.Conditions = []metav1.Condition{{Type: fleet.ConditionReady, Status: metav1.ConditionTrue}}
	c.Status.Summary = fleet.BundleSummary{Ready: 1, DesiredReady: 1}
	tests := []struct {
		name     string
		selector *metav1.LabelSelector
	}{
		{name: "In without values", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn}}}},
		{name: "Exists with values", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpExists, Values: []string{"prod"}}}}},
		{name: "unknown operator", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near", Values: []string{"prod"}}}}},
		{name: "invalid label value", selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "no spaces allowed"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ws", Generation: 4}, Spec: fleet.ClusterGroupSpec{Selector: tc.selector}}
			st := ComputeGroupStatus(g, []fleet.Cluster{c})
			r := meta.FindStatusCondition(st.Conditions, fleet.ConditionReady)
			if r == nil || r.Status != metav1.ConditionFalse || r.Reason != ReasonInvalidSelector || r.ObservedGeneration != 4 {
				t.Fatalf("ready = %+v", r)
			}
			if !strings.Contains(r.Message, "invalid selector") {
				t.Fatalf("message %q does not name the selector", r.Message)
			}
			if st.ClusterCount != 0 || st.NonReadyClusterCount != 0 || st.Display.ReadyClusters != "" || st.Display.ReadyBundles != "" || st.Summary.DesiredReady != 0 {
				t.Fatalf("an invalid selector claims clusters: %+v", st)
			}
			if st.Display.State != "Error" {
				t.Fatalf("display state %q", st.Display.State)
			}
		})
	}
}
