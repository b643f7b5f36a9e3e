package bundle

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

func TestDeploymentLabels(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ws", Labels: map[string]string{
		"team": "a", "kubectl.kubernetes.io/x": "1", "objectset.rio.cattle.io/hash": "h", fleet.RepoLabel: "repo", fleet.CommitLabel: "abc",
	}}}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ws"}}
	got := DeploymentLabels(b, c, "s-123")
	want := map[string]string{"team": "a", fleet.RepoLabel: "repo", fleet.CommitLabel: "abc", fleet.BundleLabel: "app", fleet.BundleNamespaceLabel: "ws",
		fleet.ManagedLabel: "true", fleet.ClusterLabel: "c1", fleet.ClusterNamespaceLabel: "ws", fleet.ContentNameLabel: "s-123"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func plan(name string, bd *fleet.BundleDeployment, offline bool) *target.Plan {
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws"}}
	return &target.Plan{Target: &target.Target{Cluster: c, Offline: offline, DeploymentID: "new"}, Deployment: bd}
}

func TestSetStatus(t *testing.T) {
	ready := &fleet.BundleDeployment{Spec: fleet.BundleDeploymentSpec{DeploymentID: "new", StagedDeploymentID: "new"},
		Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "new", Ready: true, NonModified: true}}
	held := &fleet.BundleDeployment{Spec: fleet.BundleDeploymentSpec{DeploymentID: "old", StagedDeploymentID: "new"},
		Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "old", Ready: true, NonModified: true}}
	plans := []*target.Plan{plan("a", ready, false), plan("b", held, false), plan("c", nil, false), plan("d", held.DeepCopy(), true)}
	failed := []*target.Target{{Cluster: &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ws"}}, Err: errors.New("templating values: map has no entry for key \"x\"")}}
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	setStatus(b, statusInput{Plans: plans, Failed: failed, Rollout: &target.Result{MaxNew: 50, Partitions: []*target.Partition{{Name: "All", Plans: plans}}}, SHA256: "abc"})
	s := b.Status.Summary
	if s.Ready != 1 || s.OutOfSync != 1 || s.Pending != 1 || s.Offline != 1 || s.ErrApplied != 1 || s.DesiredReady != 5 {
		t.Fatalf("summary %+v", s)
	}
	if b.Status.Display.ReadyClusters != "1/5" || b.Status.Display.State != "ErrApplied" || b.Status.ObservedGeneration != 3 {
		t.Fatalf("display %+v gen %d", b.Status.Display, b.Status.ObservedGeneration)
	}
	c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || !strings.HasPrefix(c.Message, `cluster ws/e: templating values`) || !strings.Contains(c.Message, "OutOfSync(1) [Cluster ws/b]") {
		t.Fatalf("condition %+v", c)
	}
	if len(b.Status.PartitionStatus) != 1 || b.Status.PartitionStatus[0].Count != 4 || b.Status.PartitionStatus[0].Summary.Ready != 1 {
		t.Fatalf("partitions %+v", b.Status.PartitionStatus)
	}
	// All ready: Ready=True, and a previous Stalled condition is cleared.
	setError(b, errors.New("bad"))
	setStatus(b, statusInput{Plans: plans[:1], Rollout: &target.Result{}})
	if !meta.IsStatusConditionTrue(b.Status.Conditions, fleet.ConditionReady) || meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionStalled) != nil {
		t.Fatalf("conditions %+v", b.Status.Conditions)
	}
}

// TestPlanState: the cluster's liveness decides whether a target is
// Offline; a deployment's own Offline mark, left from while its agent was
// away, does not outlive the agent's return.
func TestPlanState(t *testing.T) {
	deployed := func(offlineMark bool) *fleet.BundleDeployment {
		bd := &fleet.BundleDeployment{Spec: fleet.BundleDeploymentSpec{DeploymentID: "new", StagedDeploymentID: "new"},
			Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "new", Ready: true, NonModified: true}}
		if offlineMark {
			bd.Status.Conditions = []metav1.Condition{{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue, Reason: "AgentOffline"}}
		}
		return bd
	}
	for _, tc := range []struct {
		name string
		p    *target.Plan
		want fleet.BundleState
	}{
		{"no deployment yet", plan("a", nil, false), fleet.Pending},
		{"online", plan("a", deployed(false), false), fleet.Ready},
		{"cluster offline", plan("a", deployed(false), true), fleet.Offline},
		{"cluster offline, marked", plan("a", deployed(true), true), fleet.Offline},
		{"cluster back, mark not yet removed", plan("a", deployed(true), false), fleet.Ready},
	} {
		if got := PlanState(tc.p); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestProgressOnly(t *testing.T) {
	notReady := func(msg string, ready int) fleet.BundleStatus {
		return fleet.BundleStatus{ObservedGeneration: 2,
			Conditions: []metav1.Condition{{Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonNotReady, Message: msg}},
			Display:    fleet.BundleDisplay{State: string(fleet.WaitApplied), ReadyClusters: msg},
			Summary:    fleet.BundleSummary{Ready: ready, DesiredReady: 50}}
	}
	base := notReady("WaitApplied(40)", 10)
	ready := notReady("", 50)
	ready.Conditions[0].Status, ready.Conditions[0].Reason = metav1.ConditionTrue, ReasonReady
	ready.Display.State = string(fleet.Ready)
	newGen := notReady("WaitApplied(30)", 20)
	newGen.ObservedGeneration = 3
	otherState := notReady("WaitApplied(30)", 20)
	otherState.Display.State = string(fleet.NotReady)
	for _, tc := range []struct {
		name string
		cur  fleet.BundleStatus
		want bool
	}{
		{"more clusters ready, same state", notReady("WaitApplied(30)", 20), true},
		{"all ready: the condition flips", ready, false},
		{"a new generation", newGen, false},
		{"another display state", otherState, false},
		{"unchanged", base, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := progressOnly(&base, &tc.cur); got != tc.want {
				t.Errorf("progressOnly = %v, want %v", got, tc.want)
			}
		})
	}
	if progressOnly(&fleet.BundleStatus{}, &base) {
		t.Error("a first status (no conditions before) counts as progress only")
	}
}

func TestSooner(t *testing.T) {
	for _, tc := range []struct{ a, b, want time.Duration }{
		{0, 0, 0}, {0, time.Second, time.Second}, {time.Second, 0, time.Second},
		{2 * time.Second, time.Second, time.Second}, {time.Second, 2 * time.Second, time.Second},
	} {
		if got := sooner(tc.a, tc.b); got != tc.want {
			t.Errorf("sooner(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestSetWriteErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		errs    []error
		wantMsg string
		wantGen int64
	}{
		{name: "one", errs: []error{errors.New("creating BundleDeployment c/app: denied")}, wantMsg: "creating BundleDeployment c/app: denied; waiting", wantGen: 2},
		{name: "sorted and capped", errs: []error{errors.New("g"), errors.New("f"), errors.New("e"), errors.New("d"), errors.New("c"), errors.New("b"), errors.New("a")},
			wantMsg: "a; b; c; d; e (and 2 more); waiting", wantGen: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Generation: 4}}
			b.Status.ObservedGeneration = 4 // as setStatus left it
			meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonNotReady, Message: "waiting"})
			setWriteErrors(b, tc.errs, 2)
			c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady)
			if c.Reason != ReasonWriteFailed || c.Message != tc.wantMsg || c.ObservedGeneration != 4 {
				t.Errorf("condition %+v", c)
			}
			if b.Status.ObservedGeneration != tc.wantGen {
				t.Errorf("observedGeneration %d, want %d", b.Status.ObservedGeneration, tc.wantGen)
			}
		})
	}
}
