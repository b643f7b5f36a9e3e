package bundledeployment_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// The upstream API server goes away (etcd stays), deployed workloads stay as
// they are, and when it is back the same agent process picks up a change
// made afterwards. Runs last in the package: it restarts the upstream.
func TestOfflineUpstreamThenResume(t *testing.T) {
	b := bundle{
		name:  "offline",
		files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: offline-cm\ndata:\n  v: \"1\"\n"},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "off-ns"},
	}
	id := put(t, b)
	waitState(t, "offline", id, fleet.Ready)

	apiServer := up.Env().ControlPlane.APIServer
	// Keep the serving certificate and service-account signing key, so the
	// restarted server is the same server to its clients.
	keep := t.TempDir()
	entries, err := os.ReadDir(apiServer.CertDir)
	must(t, err)
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(apiServer.CertDir, e.Name()))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(keep, e.Name()), data, 0o600))
	}
	// A graceful stop waits for open watches; envtest kills the server when
	// that takes longer than its stop timeout, which is just as offline.
	if err := apiServer.Stop(); err != nil && !strings.Contains(err.Error(), "timeout waiting") {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			apiServer.CertDir = keep
			_ = apiServer.Start()
		}
	}()

	// Offline for a while: the deployed ConfigMap stays as it is.
	time.Sleep(5 * time.Second)
	wantData(t, "off-ns", "offline-cm", "v", "1")

	apiServer.CertDir = keep
	eventually(t, "upstream restarted", func() error { return apiServer.Start() })
	restarted = true
	eventually(t, "upstream back", func() error {
		_, err := up.Clientset.Discovery().ServerVersion()
		return err
	})

	b.files["cm.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: offline-cm\ndata:\n  v: \"2\"\n"
	id2 := put(t, b)
	waitState(t, "offline", id2, fleet.Ready)
	wantData(t, "off-ns", "offline-cm", "v", "2")
}
