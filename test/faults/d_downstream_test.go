package faults

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv"
)

// Fault 5: the downstream API server goes down while the agent runs. The
// agent reports the failure on the BundleDeployment, retries with backoff,
// keeps running, and deploys the change once the server is back.
func TestDownstreamDown(t *testing.T) {
	g := NewWithT(t)
	const ws, agentNS, appNS = "faults-down", "faults-down-agent", "down-app"
	match := map[string]string{"fault": "down"}
	d, err := testenv.Start(testenv.Options{Name: "faults-down", WithoutCRDs: true})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = d.Stop() }()
	startManager(t, manager.Options{AgentCheckinInterval: 2 * time.Second})
	v := newWorkspace(t, ws, "down-token")
	installBootstrap(t, d, agentNS, "down-1", v, match)
	_, agentDone := startAgent(t, d.Config, agentNS, agent.Options{RetryMax: 4 * time.Second})
	waitCheckedIn(t, ws, match, 1)
	putBundle(t, ws, "down-app", "v1", match, appNS)
	waitConfigMap(t, d, appNS, "down-app", "v1")

	// The failure must be the downstream one (it names the server), not a
	// passing upstream one.
	downHost := strings.TrimPrefix(d.Config.Host, "https://")
	restart := apiServerOutage(t, d)
	putBundle(t, ws, "down-app", "v2", match, appNS)
	var msg string
	g.Eventually(func(g Gomega) {
		bds := bundleDeployments(g, ws, "down-app")
		g.Expect(bds).To(HaveLen(1))
		for _, bd := range bds {
			g.Expect(bd.Status.AppliedDeploymentID).NotTo(Equal(bd.Spec.DeploymentID))
			failed := false
			for _, c := range bd.Status.Conditions {
				if c.Status == "False" && c.Message != "" && (c.Type == fleet.ConditionDeployed || c.Type == fleet.ConditionReady) &&
					strings.Contains(c.Message, downHost) {
					failed, msg = true, c.Type+": "+c.Message
				}
			}
			g.Expect(failed).To(BeTrue(), "the failure is reported on the BundleDeployment: %+v", bd.Status.Conditions)
		}
	}, wait, tick).Should(Succeed())
	t.Logf("downstream down: reported %q", msg)
	time.Sleep(5 * time.Second) // down for a while: the agent keeps retrying
	g.Expect(agentDone).NotTo(Receive(), "the agent must not exit while downstream is down")

	back := time.Now()
	restart()
	t.Logf("RECOVERY downstream-down: downstream API server back after %s", since(back))
	back = time.Now()
	waitConfigMap(t, d, appNS, "down-app", "v2")
	g.Eventually(func(g Gomega) {
		for _, bd := range bundleDeployments(g, ws, "down-app") {
			g.Expect(deployedID(bd)).To(BeTrue(), "%+v", bd.Status)
		}
	}, wait, tick).Should(Succeed())
	t.Logf("RECOVERY downstream-down: server back -> change deployed and reported Ready in %s", since(back))
	g.Expect(agentDone).NotTo(Receive())
}
