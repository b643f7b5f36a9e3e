package bundledeployment_test

import (
	"context"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
)

// TestReleaseRecordsDeploymentID: a restarted agent learns which
// deploymentID the stored release deployed, also after a drift correction
// (a rollback, which stores a new revision of the same chart), so that it
// never adopts another deployment's release for the one its status names.
func TestReleaseRecordsDeploymentID(t *testing.T) {
	ctx := context.Background()
	var log requestLog
	dep, err := deployer.New(log.config(), agentNS)
	must(t, err)
	const ns = "restart-release"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	v1 := configMaps("metadata:\n  name: cm\ndata:\n  v: \"1\"\n")
	v2 := configMaps("metadata:\n  name: cm\ndata:\n  v: \"2\"\n")
	if _, err := dep.Deploy(ctx, deployer.Input{Name: "restart-release", DeploymentID: "d1", Manifest: v1, Options: opts}); err != nil {
		t.Fatal(err)
	}
	second, err := dep.Deploy(ctx, deployer.Input{Name: "restart-release", DeploymentID: "d2", Manifest: v2, Options: opts})
	if err != nil {
		t.Fatal(err)
	}

	restarted, err := deployer.New(log.config(), agentNS)
	must(t, err)
	cur, err := restarted.Current(context.Background(), "restart-release", opts)
	if err != nil || cur == nil {
		t.Fatalf("Current = %v, %v", cur, err)
	}
	if cur.DeploymentID != "d2" || cur.Version != second.Version {
		t.Fatalf("stored release %s deployed %q, want d2 at revision %d", cur, cur.DeploymentID, second.Version)
	}

	if err := restarted.CorrectDrift(context.Background(), "restart-release", opts, fleet.CorrectDrift{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	cur, err = restarted.Current(context.Background(), "restart-release", opts)
	if err != nil || cur == nil {
		t.Fatalf("Current after the correction = %v, %v", cur, err)
	}
	if cur.Version <= second.Version || cur.DeploymentID != "d2" {
		t.Fatalf("after the drift correction: %s deployed %q, want a newer revision of d2", cur, cur.DeploymentID)
	}
}
