package faults

import (
	"net/url"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleetgo/fleet/internal/manager"
)

// Fault 4 at the network level: a tenth of the agents reach the manager
// through a TCP proxy that is blackholed (every byte held, nothing refused:
// a silent partition) for longer than the offline threshold, while their
// processes keep running. Their clusters show Offline, a rollout to the
// others completes, and once the network is back they converge, each
// applying the rollout exactly once.
func TestNetworkCutOffline(t *testing.T) {
	g := NewWithT(t)
	const ws, total, cut = "faults-netcut", 20, 2
	all := map[string]string{"fault": "netcut"}
	cutLabels := map[string]string{"fault": "netcut", "group": "cut"}
	startManager(t, manager.Options{AgentCheckinInterval: 2 * time.Second, OfflineThreshold: 6 * time.Second})
	v := newWorkspace(t, ws, "netcut-token")
	u, err := url.Parse(upstream.Config.Host)
	g.Expect(err).NotTo(HaveOccurred())
	proxy := newProxy(t, u.Host)
	pv := v
	pv.APIServerURL = proxy.URL()
	startSimulators(t, v, total-cut, "netcut-stay", map[string]string{"fault": "netcut", "group": "stay"}, 2*time.Second)
	cutSim, _ := startSimulators(t, pv, cut, "netcut-cut", cutLabels, 2*time.Second)
	waitCheckedIn(t, ws, all, total)

	proxy.blackhole()
	cutAt := time.Now()
	offlineThenPartialRollout(t, g, cutCase{name: "network-cut", how: "traffic blackholed", ws: ws, all: all,
		total: total, cut: cut, bundle: "netcut-app"}, cutAt)
	g.Expect(cutSim.Stats.Applied.Load()).To(BeZero())

	// The network comes back; the same agent processes carry on.
	back := time.Now()
	g.Expect(proxy.restore()).To(Succeed())
	t.Logf("network restored after %s", back.Sub(cutAt).Round(100*time.Millisecond))
	g.Eventually(func(g Gomega) {
		cs := clusters(g, ws, all)
		g.Expect(cs).To(HaveLen(total))
		bds := bundleDeployments(g, ws, "netcut-app")
		for _, c := range cs {
			g.Expect(isOffline(c)).To(BeFalse(), c.Name)
			g.Expect(deployedID(bds[c.Name])).To(BeTrue(), "%s not deployed: %+v", c.Name, bds[c.Name].Status)
		}
	}, wait, tick).Should(Succeed())
	t.Logf("RECOVERY network-cut: network back -> online and converged in %s", since(back))
	g.Consistently(cutSim.Stats.Applied.Load, 3*time.Second, tick).Should(BeEquivalentTo(cut))
	g.Expect(cutSim.Stats.Registered.Load()).To(BeEquivalentTo(cut), "the agents kept their registration")
}
