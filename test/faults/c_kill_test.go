package faults

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manager"
)

// Fault 1: the controller dies mid-rollout (every request of the process
// fails at once, then it stops) and a new one starts. The rollout
// completes; no BundleDeployment that was already right is written again
// (generation and resourceVersion unchanged) and no simulated agent
// applies anything twice.
func TestControllerKilledMidRollout(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const ws, n = "faults-kill", 40
	all := map[string]string{"fault": "kill"}
	first := startManager(t, manager.Options{AgentCheckinInterval: 5 * time.Second, Workers: 2})
	v := newWorkspace(t, ws, "kill-token")
	sim, _ := startSimulators(t, v, n, "kill", all, 5*time.Second)
	waitCheckedIn(t, ws, all, n)

	putBundle(t, ws, "kill-steady", "v1", all, "kill-steady")
	putBundle(t, ws, "kill-moving", "v1", all, "kill-moving")
	allDeployed := func(g Gomega, name string) map[string]fleet.BundleDeployment {
		bds := bundleDeployments(g, ws, name)
		g.Expect(bds).To(HaveLen(n))
		for c, bd := range bds {
			g.Expect(deployedID(bd)).To(BeTrue(), "%s/%s: %+v", name, c, bd.Status)
		}
		return bds
	}
	var steady, movingV1 map[string]fleet.BundleDeployment
	g.Eventually(func(g Gomega) {
		steady = allDeployed(g, "kill-steady")
		movingV1 = allDeployed(g, "kill-moving")
	}, wait, tick).Should(Succeed())
	g.Eventually(sim.Stats.Applied.Load, wait, tick).Should(BeEquivalentTo(2 * n))

	// Roll out v2 and kill the controller as soon as it has started.
	putBundle(t, ws, "kill-moving", "v2", all, "kill-moving")
	g.Eventually(func(g Gomega) int {
		changed := 0
		for c, bd := range bundleDeployments(g, ws, "kill-moving") {
			if bd.Spec.DeploymentID != movingV1[c].Spec.DeploymentID {
				changed++
			}
		}
		return changed
	}, wait, 20*time.Millisecond).Should(BeNumerically(">", 0))
	first.kill()
	killed := time.Now()
	first.stop(t)
	time.Sleep(time.Second) // anything in flight has landed
	atKill := map[string]fleet.BundleDeployment{}
	g.Eventually(func(g Gomega) { atKill = bundleDeployments(g, ws, "kill-moving") }, wait, tick).Should(Succeed())
	var wantID string
	bundle := &fleet.Bundle{}
	g.Expect(upstream.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: "kill-moving"}, bundle)).To(Succeed())
	done := 0
	for c, bd := range atKill {
		if bd.Spec.DeploymentID != movingV1[c].Spec.DeploymentID {
			done++
			wantID = bd.Spec.DeploymentID
		}
	}
	t.Logf("controller killed with %d of %d BundleDeployments of the rollout written", done, n)

	// A new controller resumes.
	startManager(t, manager.Options{AgentCheckinInterval: 5 * time.Second, Workers: 2})
	var final map[string]fleet.BundleDeployment
	g.Eventually(func(g Gomega) {
		final = allDeployed(g, "kill-moving")
		for c, bd := range final {
			g.Expect(bd.Spec.DeploymentID).To(Equal(wantID), c)
		}
	}, wait, tick).Should(Succeed())
	t.Logf("RECOVERY controller-killed: kill -> new controller finished the rollout to %d clusters in %s", n, since(killed))

	// Nothing was rewritten without a change.
	for c, bd := range final {
		if before := atKill[c]; before.Spec.DeploymentID == wantID {
			g.Expect(bd.Generation).To(Equal(before.Generation), "%s: BundleDeployment already at v2 was rewritten", c)
		}
		g.Expect(bd.Generation).To(BeNumerically("<=", movingV1[c].Generation+2), "%s: spec written more often than staging+promotion", c)
	}
	g.Consistently(func(g Gomega) {
		for c, bd := range bundleDeployments(g, ws, "kill-steady") {
			g.Expect(bd.Generation).To(Equal(steady[c].Generation), "%s: unchanged BundleDeployment rewritten", c)
			g.Expect(bd.ResourceVersion).To(Equal(steady[c].ResourceVersion), "%s: unchanged BundleDeployment touched", c)
		}
	}, 3*time.Second, time.Second).Should(Succeed())
	// Each agent applied v1 of both bundles and v2 once: nothing twice.
	g.Eventually(sim.Stats.Applied.Load, wait, tick).Should(BeEquivalentTo(3 * n))
	g.Consistently(sim.Stats.Applied.Load, 3*time.Second, tick).Should(BeEquivalentTo(3 * n))
}
