package faults

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"

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
	g.Eventually(func(g Gomega) {
		for _, c := range clusters(g, ws, map[string]string{"group": "cut"}) {
			g.Expect(isOffline(c)).To(BeTrue(), "%s: %s", c.Name, c.Status.Display.State)
		}
	}, wait, tick).Should(Succeed())
	t.Logf("RECOVERY agents-offline: agents stopped -> clusters Offline in %s (threshold 6s)", since(cutAt))

	// A rollout meanwhile: the online clusters all get it.
	rollout := time.Now()
	putBundle(t, ws, "offline-app", "v1", all, "offline-app")
	g.Eventually(func(g Gomega) {
		bds := bundleDeployments(g, ws, "offline-app")
		g.Expect(bds).To(HaveLen(total))
		online := 0
		for _, c := range clusters(g, ws, all) {
			bd := bds[c.Name]
			if c.Labels["group"] == "cut" {
				g.Expect(bd.Status.AppliedDeploymentID).To(BeEmpty(), "an offline agent cannot apply")
				g.Expect(meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ConditionOffline)).To(BeTrue(), "%s marked Offline", bd.Name)
				continue
			}
			g.Expect(deployedID(bd)).To(BeTrue(), "%s not deployed: %+v", c.Name, bd.Status)
			online++
		}
		g.Expect(online).To(Equal(total - cut))
	}, wait, tick).Should(Succeed())
	t.Logf("RECOVERY agents-offline: rollout to the %d online clusters complete in %s", total-cut, since(rollout))

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
