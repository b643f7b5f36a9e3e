package faults

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleetgo/fleet/internal/manager"
)

// Fault 4: a tenth of the agents are stopped for longer than the offline
// threshold. Their clusters show Offline, a rollout to the others
// completes, and they converge when they come back.
func TestAgentsOfflineThenReturn(t *testing.T) {
	g := NewWithT(t)
	const ws, total, cut = "faults-offline", 20, 2
	all := map[string]string{"fault": "offline"}
	startManager(t, manager.Options{AgentCheckinInterval: 2 * time.Second, OfflineThreshold: 6 * time.Second})
	v := newWorkspace(t, ws, "offline-token")
	startSimulators(t, v, total-cut, "offline-stay", map[string]string{"fault": "offline", "group": "stay"}, 2*time.Second)
	_, stopCut := startSimulators(t, v, cut, "offline-cut", map[string]string{"fault": "offline", "group": "cut"}, 2*time.Second)
	waitCheckedIn(t, ws, all, total)

	// Cut a tenth of the agents off.
	stopCut()
	cutAt := time.Now()
	// A rollout meanwhile: the online clusters all get it.
	offlineThenPartialRollout(t, g, cutCase{name: "agents-offline", how: "agents stopped", ws: ws, all: all,
		total: total, cut: cut, bundle: "offline-app"}, cutAt)

	// The agents come back (a restarted agent registers again with the
	// same clientID and lands on the same Cluster) and converge.
	back := time.Now()
	startSimulators(t, v, cut, "offline-cut", map[string]string{"fault": "offline", "group": "cut"}, 2*time.Second)
	g.Eventually(func(g Gomega) {
		cs := clusters(g, ws, all)
		g.Expect(cs).To(HaveLen(total), "no duplicate clusters after re-registration")
		bds := bundleDeployments(g, ws, "offline-app")
		for _, c := range cs {
			g.Expect(isOffline(c)).To(BeFalse(), c.Name)
			g.Expect(deployedID(bds[c.Name])).To(BeTrue(), "%s not deployed: %+v", c.Name, bds[c.Name].Status)
		}
	}, wait, tick).Should(Succeed())
	t.Logf("RECOVERY agents-offline: returned agents -> online and converged in %s", since(back))
}
