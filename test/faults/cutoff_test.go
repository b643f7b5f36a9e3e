package faults

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// cutCase is a fault case in which some agents can no longer reach the
// manager (their process stopped, or their traffic blackholed).
type cutCase struct {
	// name and how appear in the RECOVERY lines.
	name, how string
	ws        string
	// all selects every cluster of the case; a cut-off cluster is also
	// labelled group=cut.
	all        map[string]string
	total, cut int
	bundle     string
}

// offlineThenPartialRollout checks what the cut-off must not break: the
// cut-off clusters show Offline, and a bundle rolled out meanwhile reaches
// every other cluster while the cut-off clusters' BundleDeployments stay
// unapplied and marked Offline. cutAt is when the cut began.
func offlineThenPartialRollout(t *testing.T, g *WithT, c cutCase, cutAt time.Time) {
	t.Helper()
	cutLabels := map[string]string{"group": "cut"}
	for k, v := range c.all {
		cutLabels[k] = v
	}
	g.Eventually(func(g Gomega) {
		for _, cl := range clusters(g, c.ws, cutLabels) {
			g.Expect(isOffline(cl)).To(BeTrue(), "%s: %s", cl.Name, cl.Status.Display.State)
		}
	}, wait, tick).Should(Succeed())
	t.Logf("RECOVERY %s: %s -> clusters Offline in %s (threshold 6s)", c.name, c.how, since(cutAt))

	rollout := time.Now()
	putBundle(t, c.ws, c.bundle, "v1", c.all, c.bundle)
	g.Eventually(func(g Gomega) {
		bds := bundleDeployments(g, c.ws, c.bundle)
		g.Expect(bds).To(HaveLen(c.total))
		online := 0
		for _, cl := range clusters(g, c.ws, c.all) {
			bd := bds[cl.Name]
			if cl.Labels["group"] == "cut" {
				g.Expect(bd.Status.AppliedDeploymentID).To(BeEmpty(), "a cut-off agent cannot apply")
				g.Expect(meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ConditionOffline)).To(BeTrue(), "%s marked Offline", bd.Name)
				continue
			}
			g.Expect(deployedID(bd)).To(BeTrue(), "%s not deployed: %+v", cl.Name, bd.Status)
			online++
		}
		g.Expect(online).To(Equal(c.total - c.cut))
	}, wait, tick).Should(Succeed())
	t.Logf("RECOVERY %s: rollout to the %d reachable clusters complete in %s", c.name, c.total-c.cut, since(rollout))
}
