package faults

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/manager"
)

// Fault 2: the manager's kube-apiserver restarts (etcd keeps its data).
// The controller, a real agent and simulated agents reconnect on their
// own; a change made just before the outage and one made right after it
// both reach every cluster. Runs last: it restarts the shared upstream.
func TestUpstreamRestart(t *testing.T) {
	g := NewWithT(t)
	const ws, agentNS, appNS, sims = "faults-up", "faults-up-agent", "up-app", 10
	match := map[string]string{"fault": "up"}
	startManager(t, manager.Options{AgentCheckinInterval: 2 * time.Second})
	v := newWorkspace(t, ws, "up-token")
	installBootstrap(t, downstream, agentNS, "up-1", v, match)
	_, agentDone := startAgent(t, downstream.Config, agentNS, agent.Options{RetryMax: 4 * time.Second})
	startSimulators(t, v, sims, "up", match, 2*time.Second)
	waitCheckedIn(t, ws, match, sims+1)
	allAt := func(value string) func(g Gomega) {
		return func(g Gomega) {
			bds := bundleDeployments(g, ws, "up-app")
			g.Expect(bds).To(HaveLen(sims + 1))
			var id string
			for c, bd := range bds {
				g.Expect(deployedID(bd)).To(BeTrue(), "%s: %+v", c, bd.Status)
				if id == "" {
					id = bd.Spec.DeploymentID
				}
				g.Expect(bd.Spec.DeploymentID).To(Equal(id))
			}
			b := bundleOf(g, ws, "up-app")
			g.Expect(b.Spec.Resources[0].Content).To(ContainSubstring(value))
			g.Expect(b.Status.Summary.Ready).To(Equal(sims + 1))
			g.Expect(b.Status.ObservedGeneration).To(Equal(b.Generation))
		}
	}
	putBundle(t, ws, "up-app", "v1", match, appNS)
	g.Eventually(allAt("v1"), wait, tick).Should(Succeed())
	waitConfigMap(t, downstream, appNS, "up-app", "v1")

	// A change just before the outage.
	putBundle(t, ws, "up-app", "v2", match, appNS)
	stopped := time.Now()
	restart := apiServerOutage(t, upstream)
	t.Logf("upstream API server stopped in %s", since(stopped))
	time.Sleep(5 * time.Second)
	g.Expect(agentDone).NotTo(Receive(), "the agent must not exit while the manager is unreachable")
	down := time.Now()
	restart()
	t.Logf("upstream API server back in %s", since(down))
	back := time.Now()
	g.Eventually(allAt("v2"), wait, tick).Should(Succeed())
	waitConfigMap(t, downstream, appNS, "up-app", "v2")
	t.Logf("RECOVERY upstream-restart: server back -> change made before the outage on all %d clusters in %s", sims+1, since(back))

	// A change right after: every watch is live again.
	after := time.Now()
	putBundle(t, ws, "up-app", "v3", match, appNS)
	g.Eventually(allAt("v3"), wait, tick).Should(Succeed())
	waitConfigMap(t, downstream, appNS, "up-app", "v3")
	t.Logf("RECOVERY upstream-restart: change made after the restart on all %d clusters in %s", sims+1, since(after))
	// Heartbeats resumed: every cluster is online.
	g.Eventually(func(g Gomega) {
		for _, c := range clusters(g, ws, match) {
			g.Expect(isOffline(c)).To(BeFalse(), c.Name)
			g.Expect(time.Since(c.Status.Agent.LastSeen.Time)).To(BeNumerically("<", time.Minute), c.Name)
		}
	}, wait, tick).Should(Succeed())
	g.Expect(agentDone).NotTo(Receive())
}
