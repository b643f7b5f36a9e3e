package faults

import (
	"net/url"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleetgo/fleet/internal/manager"
)

// The retry policy the simulated agents (like the real agent's own loops)
// promise: every retry waits its backoff d (from retryMin, doubling) plus a
// random d·U[0, retryJitter). Agents that lose the manager at the same
// instant therefore come back spread over at least retryMin·retryJitter,
// the smallest window one retry is jittered over; agents in lockstep would
// come back within a few milliseconds of each other.
const (
	retryMin    = time.Second
	retryJitter = 0.2
	// cutOff is how long the agents stay cut off: retries at about 0, 1,
	// 3, 7 s; the next ones due around 15 s.
	cutOff = 10 * time.Second
)

// Fault 3: watch expiry without a storm. Simulated agents reach the manager
// through a TCP proxy that drops all their connections at once (the worst
// case: every agent starts its backoff at the same instant). While they are
// cut off, a change is made, the API server crashes and restarts and etcd is
// compacted, so every agent's watch resumes from a resourceVersion that no
// longer exists. When the network is back each agent must relist exactly
// once, apply the change exactly once, and the agents' reconnects must be
// spread by their jitter rather than arrive in lockstep. The reconnect times
// are read from the API server's audit log, not from the agents.
func TestNoReconnectStormAfterCompaction(t *testing.T) {
	g := NewWithT(t)
	const sims = 20
	ws, app := "faults-storm", "storm-app"
	match := map[string]string{"fault": "storm"}
	startManager(t, manager.Options{AgentCheckinInterval: 2 * time.Second})
	v := newWorkspace(t, ws, "storm-token")
	u, err := url.Parse(upstream.Config.Host)
	g.Expect(err).NotTo(HaveOccurred())
	proxy := newProxy(t, u.Host)
	pv := v
	pv.APIServerURL = proxy.URL()
	sim, _ := startSimulators(t, pv, sims, "storm", match, 2*time.Second)
	clusterNS := map[string]bool{}
	for _, c := range waitCheckedIn(t, ws, match, sims) {
		clusterNS[c.Status.Namespace] = true
	}
	allAt := func(value string) func(g Gomega) {
		return func(g Gomega) {
			bds := bundleDeployments(g, ws, app)
			g.Expect(bds).To(HaveLen(sims))
			for c, bd := range bds {
				g.Expect(deployedID(bd)).To(BeTrue(), "%s: %+v", c, bd.Status)
			}
			b := bundleOf(g, ws, app)
			g.Expect(b.Spec.Resources[0].Content).To(ContainSubstring(value))
			g.Expect(b.Status.Summary.Ready).To(Equal(sims))
		}
	}
	putBundle(t, ws, app, "v1", match, "storm-app")
	g.Eventually(allAt("v1"), wait, tick).Should(Succeed())
	applied := sim.Stats.Applied.Load()

	// Every agent loses the network at once; meanwhile a change, an API
	// server crash and a compaction.
	proxy.reset()
	cut := time.Now()
	putBundle(t, ws, app, "v2", match, "storm-app")
	restart := apiServerOutage(t, upstream)
	rev := compactEtcd(t)
	restart()
	t.Logf("agents cut off; API server restarted and etcd compacted at revision %d in %s", rev, since(cut))
	// Keep them cut off long enough for several retries, so that their
	// backoffs have grown as after a real outage.
	time.Sleep(time.Until(cut.Add(cutOff)))

	restored := time.Now()
	g.Expect(proxy.restore()).To(Succeed())
	g.Eventually(allAt("v2"), wait, tick).Should(Succeed())
	t.Logf("RECOVERY no-storm: network back after a %s cut -> change on all %d clusters in %s", restored.Sub(cut).Round(100*time.Millisecond), sims, since(restored))

	// Clean relist: every agent's old watch expired and it listed once.
	// Relisting re-delivers every BundleDeployment, yet each agent applies
	// only the new deploymentID.
	g.Consistently(func() int64 { return sim.Stats.Applied.Load() - applied }, 3*time.Second, tick).Should(BeEquivalentTo(sims))
	agents := byAgent(auditEvents(t, restored), clusterNS)
	g.Expect(agents).To(HaveLen(sims), "every agent came back")
	var back []time.Duration
	for user, evs := range agents {
		lists := 0
		for _, ev := range evs {
			if ev.Verb == "list" {
				lists++
			}
		}
		g.Expect(lists).To(Equal(1), "%s relisted %d times after its watch expired", user, lists)
		back = append(back, evs[0].RequestReceivedTimestamp.Sub(restored))
	}
	slices.Sort(back)
	p10, p90 := back[len(back)/10], back[len(back)*9/10-1]
	window := time.Duration(float64(retryMin) * retryJitter)
	t.Logf("RECOVERY no-storm: first requests of the %d agents after the network came back: first %s, p10 %s, p50 %s, p90 %s, last %s (10-90%% spread %s; jitter window %s)",
		sims, back[0].Round(time.Millisecond), p10.Round(time.Millisecond), back[len(back)/2].Round(time.Millisecond),
		p90.Round(time.Millisecond), back[len(back)-1].Round(time.Millisecond), (p90 - p10).Round(time.Millisecond), window)
	// Not a storm: the middle 80 % of the agents did not all come back
	// within a quarter of the smallest jitter window. For 20 agents
	// jittered independently over at least that window, this fails with a
	// probability below 1e-5 (order statistics of uniforms); in lockstep
	// (a few milliseconds apart) it always fails.
	g.Expect(p90-p10).To(BeNumerically(">=", window/4), "agents reconnected in lockstep: %v", back)
}
