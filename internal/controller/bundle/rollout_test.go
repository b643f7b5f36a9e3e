package bundle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func intOrStr(i int) *intstr.IntOrString { v := intstr.FromInt32(int32(i)); return &v }

// rolloutFixture is a workspace of n online clusters labelled half=0|1 and
// one bundle over all of them, fully deployed at version 1.
type rolloutFixture struct {
	ctx  context.Context
	ws   string
	name string
}

func newRolloutFixture(t *testing.T, ws string, n int, rs *fleet.RolloutStrategy, offline map[string]bool) *rolloutFixture {
	t.Helper()
	f := &rolloutFixture{ctx: context.Background(), ws: ws, name: "web"}
	createNamespace(t, f.ctx, ws, nil)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("r-%02d", i)
		seen := time.Second
		if offline[name] {
			seen = 2 * offlineThreshold
		}
		newCluster(t, f.ctx, ws, name, map[string]string{"half": fmt.Sprint(i * 2 / n)}, seen)
	}
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: f.name}}
	b.Spec.Resources = resources("v: 1\n")
	b.Spec.RolloutStrategy = rs
	b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}}
	must(t, f.ctx.Err())
	must(t, env.Client.Create(f.ctx, b))
	eventually(t, 60*time.Second, func() error {
		bds, err := bundleDeployments(f.ctx, ws, f.name)
		if err != nil {
			return err
		}
		if len(bds) != n {
			return fmt.Errorf("%d deployments, want %d", len(bds), n)
		}
		if err := playAgents(f.ctx, ws, f.name, nil, offline); err != nil {
			return err
		}
		return f.applied(offline)
	})
	return f
}

// update changes the bundle's resources: a new version to roll out.
func (f *rolloutFixture) update(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: f.ws, Name: f.name}}
	update(t, f.ctx, b, false, func() { b.Spec.Resources = resources("v: 2\n") })
}

// promoted returns the clusters whose current version is the staged (new)
// one, and checks that every deployment has the new version staged.
func (f *rolloutFixture) promoted() (map[string]bool, error) {
	bds, err := bundleDeployments(f.ctx, f.ws, f.name)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	var staged string
	for cl, bd := range bds {
		if staged == "" {
			staged = bd.Spec.StagedDeploymentID
		}
		if bd.Spec.StagedDeploymentID != staged {
			return nil, fmt.Errorf("%s: new version not staged yet", cl)
		}
		if bd.Spec.DeploymentID == staged {
			out[cl] = true
		}
	}
	return out, nil
}

// applied reports an error naming a deployment, other than those in skip,
// that has no version yet or whose agent has not yet applied and readied
// its current one.
func (f *rolloutFixture) applied(skip map[string]bool) error {
	bds, err := bundleDeployments(f.ctx, f.ws, f.name)
	if err != nil {
		return err
	}
	for _, cl := range sortedKeys(bds) {
		bd := bds[cl]
		if !skip[cl] && (bd.Spec.DeploymentID == "" || bd.Status.AppliedDeploymentID != bd.Spec.DeploymentID || !bd.Status.Ready) {
			return fmt.Errorf("%s has not applied %s yet", cl, bd.Spec.DeploymentID)
		}
	}
	return nil
}

func count(m map[string]bool, prefix func(string) bool) int {
	n := 0
	for k, v := range m {
		if v && prefix(k) {
			n++
		}
	}
	return n
}

func firstHalf(name string) bool  { return name < "r-05" }
func secondHalf(name string) bool { return name >= "r-05" }
func all(string) bool             { return true }

// expectPromoted waits until exactly first/second are promoted in each half
// and checks that it stays so while the agents do nothing.
func (f *rolloutFixture) expectPromoted(t *testing.T, first, second int) {
	t.Helper()
	check := func() error {
		p, err := f.promoted()
		if err != nil {
			return err
		}
		if a, b := count(p, firstHalf), count(p, secondHalf); a != first || b != second {
			return fmt.Errorf("promoted %d+%d, want %d+%d", a, b, first, second)
		}
		return nil
	}
	eventually(t, 60*time.Second, check)
	consistently(t, 2*time.Second, check)
}

func TestPartitionedRollout(t *testing.T) {
	rs := &fleet.RolloutStrategy{Partitions: []fleet.Partition{
		{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"half": "0"}}, MaxUnavailable: intOrStr(2)},
		{Name: "rest", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"half": "1"}}, MaxUnavailable: intOrStr(2)},
	}}
	f := newRolloutFixture(t, "ws-partitions", 10, rs, nil)
	f.update(t)
	// Two of the canary partition at a time; the rest waits for it.
	f.expectPromoted(t, 2, 0)
	must(t, playAgents(f.ctx, f.ws, f.name, nil, nil))
	f.expectPromoted(t, 4, 0)
	must(t, playAgents(f.ctx, f.ws, f.name, nil, nil))
	// The last canary fits and leaves the canary partition available, so
	// the next partition starts.
	f.expectPromoted(t, 5, 2)

	b := &fleet.Bundle{}
	must(t, env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ws, Name: f.name}, b))
	if len(b.Status.PartitionStatus) != 2 || b.Status.PartitionStatus[0].Name != "canary" || b.Status.PartitionStatus[0].Count != 5 {
		t.Fatalf("partition status: %+v", b.Status.PartitionStatus)
	}
	// Agents report the promoted ones applied but not ready: the rollout
	// halts at the rest partition's maxUnavailable.
	stuck := map[string]bool{}
	p, err := f.promoted()
	must(t, err)
	for cl := range p {
		if secondHalf(cl) {
			stuck[cl] = true
		}
	}
	must(t, playAgents(f.ctx, f.ws, f.name, stuck, nil))
	f.expectPromoted(t, 5, 2)
	eventually(t, 60*time.Second, func() error {
		b := &fleet.Bundle{}
		if err := env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ws, Name: f.name}, b); err != nil {
			return err
		}
		if b.Status.Summary.NotReady != 2 || b.Status.Summary.OutOfSync != 3 || b.Status.Display.ReadyClusters != "5/10" {
			return fmt.Errorf("summary %+v", b.Status.Summary)
		}
		if c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("ready condition %+v", c)
		}
		return nil
	})
	// Recovery: everything converges.
	eventually(t, 90*time.Second, func() error {
		if err := playAgents(f.ctx, f.ws, f.name, nil, nil); err != nil {
			return err
		}
		p, err := f.promoted()
		if err != nil {
			return err
		}
		if n := count(p, all); n != 10 {
			return fmt.Errorf("%d promoted", n)
		}
		return nil
	})
}

func TestMaxUnavailableHaltsAndOfflineDoesNotBlock(t *testing.T) {
	offline := map[string]bool{"r-03": true}
	f := newRolloutFixture(t, "ws-offline", 8, &fleet.RolloutStrategy{MaxUnavailable: intOrStr(2)}, offline)
	eventually(t, 60*time.Second, func() error {
		c := &fleet.Cluster{}
		if err := env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ws, Name: "r-03"}, c); err != nil {
			return err
		}
		if c.Status.Display.State != "Offline" || !meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConditionOffline) {
			return fmt.Errorf("cluster r-03 not offline: %+v", c.Status.Display)
		}
		bds, err := bundleDeployments(f.ctx, f.ws, f.name)
		if err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(bds["r-03"].Status.Conditions, fleet.ConditionOffline) {
			return fmt.Errorf("deployment of offline cluster not marked Offline")
		}
		return nil
	})
	f.update(t)
	// The offline cluster is promoted but not counted: 2 online ones plus
	// the offline one.
	check := func(want int) func() error {
		return func() error {
			p, err := f.promoted()
			if err != nil {
				return err
			}
			if n := count(p, all); n != want || !p["r-03"] {
				return fmt.Errorf("%d promoted (offline promoted: %v), want %d", n, p["r-03"], want)
			}
			return nil
		}
	}
	eventually(t, 60*time.Second, check(3))
	consistently(t, 2*time.Second, check(3))
	// Promoted clusters apply but stay not ready: halted at maxUnavailable.
	p, err := f.promoted()
	must(t, err)
	must(t, playAgents(f.ctx, f.ws, f.name, p, offline))
	consistently(t, 3*time.Second, check(3))
	// Agents become ready: the rollout finishes although r-03 never
	// applies anything.
	eventually(t, 90*time.Second, func() error {
		if err := playAgents(f.ctx, f.ws, f.name, nil, offline); err != nil {
			return err
		}
		if err := check(8)(); err != nil {
			return err
		}
		// A cluster promoted after playAgents listed the deployments has
		// not applied yet: play again on the next round.
		return f.applied(offline)
	})
	eventually(t, 60*time.Second, func() error {
		b := &fleet.Bundle{}
		if err := env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ws, Name: f.name}, b); err != nil {
			return err
		}
		if b.Status.Summary.Ready != 7 || b.Status.Summary.Offline != 1 || b.Status.Unavailable != 0 {
			return fmt.Errorf("summary %+v unavailable %d", b.Status.Summary, b.Status.Unavailable)
		}
		return nil
	})
	// The cluster comes back: its deployment loses the Offline mark.
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ws, Name: "r-03"}}
	update(t, f.ctx, c, true, func() { c.Status.Agent.LastSeen = metav1.Now() })
	eventually(t, 60*time.Second, func() error {
		bds, err := bundleDeployments(f.ctx, f.ws, f.name)
		if err != nil {
			return err
		}
		if meta.IsStatusConditionTrue(bds["r-03"].Status.Conditions, fleet.ConditionOffline) {
			return fmt.Errorf("still marked offline")
		}
		return nil
	})
}

// TestRolloutLeavesDeploymentsUntracked checks that a rollout's writes
// leave BundleDeployments without managedFields: the manager's update
// resets them, and the agent's status update that follows adds none. The
// API server tracks them on creation, so a deployment only rolled out once
// has them.
func TestRolloutLeavesDeploymentsUntracked(t *testing.T) {
	f := newRolloutFixture(t, "untracked-ws", 2, nil, nil)
	bds, err := bundleDeployments(f.ctx, f.ws, f.name)
	must(t, err)
	before := map[string]string{}
	for cl, bd := range bds {
		if len(bd.ManagedFields) == 0 {
			t.Fatalf("%s: a created deployment has no managedFields; the API server is expected to track a creation", cl)
		}
		before[cl] = bd.Spec.DeploymentID
	}
	f.update(t)
	eventually(t, 60*time.Second, func() error {
		bds, err := bundleDeployments(f.ctx, f.ws, f.name)
		if err != nil {
			return err
		}
		for cl, bd := range bds {
			if bd.Spec.DeploymentID == before[cl] {
				return fmt.Errorf("%s: not rolled out yet", cl)
			}
		}
		return playAgents(f.ctx, f.ws, f.name, nil, nil)
	})
	bds, err = bundleDeployments(f.ctx, f.ws, f.name)
	must(t, err)
	for cl, bd := range bds {
		if bd.Status.AppliedDeploymentID != bd.Spec.DeploymentID {
			t.Errorf("%s: the agent's report of %s was not kept", cl, bd.Spec.DeploymentID)
		}
		if len(bd.ManagedFields) != 0 {
			t.Errorf("%s: managedFields after the rollout and the agent's status update: %+v", cl, bd.ManagedFields)
		}
	}
}
