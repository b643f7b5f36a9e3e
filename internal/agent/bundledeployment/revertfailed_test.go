package bundledeployment_test

import (
	"fmt"
	"strings"
	"testing"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

// revertBundle is a bundle of a ConfigMap (a=value) and a Service whose
// port the API server accepts or, with bad, refuses.
func revertBundle(name, value string, bad bool) bundle {
	port := "80"
	if bad {
		port = "99999"
	}
	return bundle{name: name, opts: fleet.BundleDeploymentOptions{DefaultNamespace: name + "-ns"}, files: map[string]string{
		"cm.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  a: \"" + value + "\"\n",
		"svc.yaml": "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\nspec:\n  ports:\n  - port: " + port + "\n",
	}}
}

// failUpgrade deploys name at v1, then an upgrade the API server refuses in
// part (the ConfigMap goes to a=2, the Service is rejected), and waits for
// the deploy error. It returns v1's deploymentID.
func failUpgrade(t *testing.T, name string) string {
	t.Helper()
	id1 := put(t, revertBundle(name, "1", false))
	waitState(t, name, id1, fleet.Ready)
	put(t, revertBundle(name, "2", true))
	eventually(t, "deploy error", func() error {
		bd := getBD(t, name)
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "99999") {
			return fmt.Errorf("deployed condition %+v", c)
		}
		return nil
	})
	// What makes the revert matter: Helm applied the ConfigMap before the
	// Service failed, and recorded the revision failed.
	wantData(t, name+"-ns", name, "a", "2")
	hist := releaseHistory(t, name+"-ns", name)
	if len(hist) != 2 || hist[1].Info.Status != rcommon.StatusFailed {
		t.Fatalf("history after the failed upgrade: %s", historyString(hist))
	}
	return id1
}

// wantReverted checks that v1 was deployed again: its ConfigMap is back,
// the BundleDeployment is Ready with v1's deploymentID and names a new
// revision, deployed.
func wantReverted(t *testing.T, name, id1 string) {
	t.Helper()
	wantData(t, name+"-ns", name, "a", "1")
	bd := waitState(t, name, id1, fleet.Ready)
	hist := releaseHistory(t, name+"-ns", name)
	last := hist[len(hist)-1]
	if last.Version < 3 || last.Info.Status != rcommon.StatusDeployed {
		t.Fatalf("history after the revert: %s, want a newer revision deployed", historyString(hist))
	}
	if want := fmt.Sprintf("%s/%s:%d", name+"-ns", name, last.Version); bd.Status.Release != want {
		t.Fatalf("status.release %q, want %q", bd.Status.Release, want)
	}
	if bundledeployment.State(bd) != fleet.Ready {
		t.Fatalf("state %s", bundledeployment.State(bd))
	}
}

// Reverting the commit of a failed upgrade (the manager writes the earlier
// deploymentID back) deploys the earlier deploymentID again at once: the
// failed attempt changed objects, so what was deployed before it is no
// longer what the cluster has.
func TestRevertAfterFailedUpgradeRedeploys(t *testing.T) {
	id1 := failUpgrade(t, "rvf")
	put(t, revertBundle("rvf", "1", false))
	wantReverted(t, "rvf", id1)
}

// The same revert seen by an agent that lost what it remembered (here by
// a pause, which forgets it as a restart does): the stored release's
// deployed revision has v1's deploymentID, but a later revision failed, so
// it is not taken as applied and v1 is deployed.
func TestRevertAfterFailedUpgradeRedeploysAfterRestart(t *testing.T) {
	id1 := failUpgrade(t, "rvr")
	setPaused(t, "rvr", true)
	eventually(t, "pause forgets the deployment", func() error {
		if n := bundledeployment.WatchedObjects(clusterNS, "rvr"); n != 0 {
			return fmt.Errorf("%d objects still watched", n)
		}
		return nil
	})
	put(t, revertBundle("rvr", "1", false))
	if !getBD(t, "rvr").Spec.Paused {
		t.Fatal("the revert resumed the BundleDeployment")
	}
	setPaused(t, "rvr", false)
	wantReverted(t, "rvr", id1)
}
