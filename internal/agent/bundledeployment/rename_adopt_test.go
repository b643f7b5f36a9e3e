package bundledeployment_test

import (
	"context"
	"testing"
	"time"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

// Changing helm.releaseName of a bundle whose objects have fixed names
// converges: the new release adopts the objects of the old one, which the
// same BundleDeployment deployed (they keep their UID: never deleted and
// re-created), and the old release is then collected, removing only what
// the new one no longer lists. Another bundle's release still cannot take
// the adopted object.
func TestRenamedReleaseKeepsObjects(t *testing.T) {
	const ns = "rename-keep-ns"
	b := bundle{
		name: "rename-keep",
		files: map[string]string{
			"kept.yaml": cmFile("kept", "1"), "dropped.yaml": cmFile("dropped", "1"),
		},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{ReleaseName: "keep-one"}},
	}
	waitState(t, b.name, put(t, b), fleet.Ready)
	before, err := configMap(t, ns, "kept")
	must(t, err)

	b.opts.Helm.ReleaseName = "keep-two"
	b.files = map[string]string{"kept.yaml": cmFile("kept", "2")}
	id := put(t, b)
	waitState(t, b.name, id, fleet.Ready)
	must(t, bundledeployment.Collect(context.Background()))
	waitNoReleaseSecrets(t, ns, "keep-one")
	wantGone(t, ns, "dropped")
	check := func(when string) {
		t.Helper()
		cm, err := configMap(t, ns, "kept")
		if err != nil || cm.UID != before.UID || cm.Data["k"] != "2" ||
			cm.Annotations["meta.helm.sh/release-name"] != "keep-two" {
			t.Fatalf("%s: kept uid %s data %v annotations %v (err %v); want uid %s, k=2, owned by keep-two",
				when, cm.UID, cm.Data, cm.Annotations, err, before.UID)
		}
		if hist := releaseHistory(t, ns, "keep-two"); len(hist) == 0 {
			t.Fatalf("%s: release keep-two is gone", when)
		}
	}
	check("after the old release was collected")

	other := bundle{
		name:  "rename-keep-other",
		files: map[string]string{"kept.yaml": cmFile("kept", "other")},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{ReleaseName: "keep-three"}},
	}
	put(t, other)
	waitDeployError(t, other.name, "ConfigMap "+ns+"/kept exists and cannot be imported into the current release: it belongs to Helm release "+ns+"/keep-two")
	time.Sleep(2 * time.Second)
	check("after another bundle was refused it")
	waitState(t, b.name, id, fleet.Ready)
}
