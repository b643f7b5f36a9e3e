package faults

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/manager"
)

// Fault 2: the manager's kube-apiserver crashes and restarts (etcd keeps
// its data). The controller, a real agent and simulated agents reconnect on
// their own; a change made just before the outage and one made right after
// it both reach every cluster. Runs last: it restarts the shared upstream.
func TestUpstreamRestart(t *testing.T) {
	upstreamRestart(t, "up", func() func() { return apiServerOutage(t, upstream) })
}

// Fault 2 again, one layer down: the manager's etcd crashes (SIGKILL) and
// restarts with its data, at the same address; the kube-apiserver stays up.
// While etcd is away every write fails (the controller's BundleDeployment
// writes, the agents' status and heartbeat patches): none of them may be
// lost, each must be retried until it lands.
func TestEtcdRestart(t *testing.T) {
	upstreamRestart(t, "etcd", func() func() {
		if err := upstream.StopEtcd(); err != nil {
			t.Fatal(err)
		}
		started := false
		start := func() {
			if started {
				return
			}
			started = true
			NewWithT(t).Expect(upstream.StartEtcd()).To(Succeed())
			// Served from etcd, not from the API server's cache.
			NewWithT(t).Eventually(func() error {
				return upstream.Client.Get(context.Background(), client.ObjectKey{Name: "kube-system"}, &corev1.Namespace{})
			}, wait, tick).Should(Succeed())
		}
		t.Cleanup(start)
		return start
	})
}

// upstreamRestart makes the fault (which returns the function that ends
// it) right after a change, and checks that the change and a later one
// reach every cluster, with one apply per change and agent.
func upstreamRestart(t *testing.T, name string, fault func() (restore func())) {
	g := NewWithT(t)
	const sims = 10
	ws, agentNS, appNS, app := "faults-"+name, "faults-"+name+"-agent", name+"-app", name+"-app"
	match := map[string]string{"fault": name}
	startManager(t, manager.Options{AgentCheckinInterval: 2 * time.Second})
	v := newWorkspace(t, ws, name+"-token")
	installBootstrap(t, downstream, agentNS, name+"-1", v, match)
	_, agentDone := startAgent(t, downstream.Config, agentNS, agent.Options{RetryMax: 4 * time.Second})
	sim, _ := startSimulators(t, v, sims, name, match, 2*time.Second)
	waitCheckedIn(t, ws, match, sims+1)
	allAt := func(value string) func(g Gomega) {
		return func(g Gomega) {
			bds := bundleDeployments(g, ws, app)
			g.Expect(bds).To(HaveLen(sims + 1))
			var id string
			for c, bd := range bds {
				g.Expect(deployedID(bd)).To(BeTrue(), "%s: %+v", c, bd.Status)
				if id == "" {
					id = bd.Spec.DeploymentID
				}
				g.Expect(bd.Spec.DeploymentID).To(Equal(id))
			}
			b := bundleOf(g, ws, app)
			g.Expect(b.Spec.Resources[0].Content).To(ContainSubstring(value))
			g.Expect(b.Status.Summary.Ready).To(Equal(sims + 1))
			g.Expect(b.Status.ObservedGeneration).To(Equal(b.Generation))
		}
	}
	putBundle(t, ws, app, "v1", match, appNS)
	g.Eventually(allAt("v1"), wait, tick).Should(Succeed())
	waitConfigMap(t, downstream, appNS, app, "v1")

	// A change just before the outage.
	appliedBefore := sim.Stats.Applied.Load()
	putBundle(t, ws, app, "v2", match, appNS)
	stopped := time.Now()
	restart := fault()
	t.Logf("fault %s made in %s", name, since(stopped))
	time.Sleep(5 * time.Second)
	g.Expect(agentDone).NotTo(Receive(), "the agent must not exit while the manager is unavailable")
	down := time.Now()
	restart()
	t.Logf("fault %s ended (serving again) in %s", name, since(down))
	back := time.Now()
	g.Eventually(allAt("v2"), wait, tick).Should(Succeed())
	waitConfigMap(t, downstream, appNS, app, "v2")
	t.Logf("RECOVERY upstream-restart(%s): fault ended -> change made before the outage on all %d clusters in %s (%s from the start of the restart)",
		name, sims+1, since(back), since(down))

	// A change right after: every watch is live again.
	after := time.Now()
	putBundle(t, ws, app, "v3", match, appNS)
	g.Eventually(allAt("v3"), wait, tick).Should(Succeed())
	waitConfigMap(t, downstream, appNS, app, "v3")
	t.Logf("RECOVERY upstream-restart(%s): change made after the restart on all %d clusters in %s", name, sims+1, since(after))
	// Relisting re-delivers every BundleDeployment, but an agent applies a
	// deploymentID once: two changes, two applies per simulated agent.
	g.Expect(sim.Stats.Applied.Load() - appliedBefore).To(BeEquivalentTo(2 * sims))
	// Heartbeats resumed: every cluster is online.
	g.Eventually(func(g Gomega) {
		for _, c := range clusters(g, ws, match) {
			g.Expect(isOffline(c)).To(BeFalse(), c.Name)
			g.Expect(time.Since(c.Status.Agent.LastSeen.Time)).To(BeNumerically("<", time.Minute), c.Name)
		}
	}, wait, tick).Should(Succeed())
	g.Expect(agentDone).NotTo(Receive())
}

// compactEtcd compacts the upstream etcd at its current revision.
func compactEtcd(t *testing.T) int64 {
	t.Helper()
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{upstream.EtcdURL()}, DialTimeout: 10 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = cli.Close() }()
	resp, err := cli.Get(ctx, "compact-probe")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
	g.Expect(err).NotTo(HaveOccurred())
	return resp.Header.Revision
}
