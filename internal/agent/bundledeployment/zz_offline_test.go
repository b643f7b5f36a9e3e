package bundledeployment_test

import (
	"testing"
	"time"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// The upstream API server goes away (etcd stays), deployed workloads stay as
// they are, and when it is back the same agent process picks up a change
// made afterwards. Not parallel: the package's parallel tests go on only
// once every sequential test is done, so none of them sees the upstream
// away (or a restarted one before it is ready).
func TestOfflineUpstreamThenResume(t *testing.T) {
	b := bundle{
		name:  "offline",
		files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: offline-cm\ndata:\n  v: \"1\"\n"},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "off-ns"},
	}
	id := put(t, b)
	waitState(t, "offline", id, fleet.Ready)

	// Etcd keeps running; the restarted server keeps its certificates
	// and keys, so it is the same server to its clients.
	must(t, up.StopAPIServer())
	restarted := false
	defer func() {
		if !restarted {
			must(t, up.StartAPIServer())
		}
	}()

	// Offline for a while: the deployed ConfigMap stays as it is.
	time.Sleep(5 * time.Second)
	wantData(t, "off-ns", "offline-cm", "v", "1")

	restarted = true
	must(t, up.StartAPIServer())

	b.files["cm.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: offline-cm\ndata:\n  v: \"2\"\n"
	id2 := put(t, b)
	waitState(t, "offline", id2, fleet.Ready)
	wantData(t, "off-ns", "offline-cm", "v", "2")
}
