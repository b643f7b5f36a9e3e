package deployer

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// After a failed upgrade (the API server refused one of its objects, but
// Helm applied the others and recorded the revision failed), a restarted
// agent must not take the earlier deployed revision as what is in the
// cluster: Current finds nothing, so the agent deploys its spec again.
// Deploying the earlier revision's manifest then restores its objects.
func TestCurrentAfterFailedUpgrade(t *testing.T) {
	ctx := context.Background()
	const ns = "revert-failed"
	d := newTestDeployer(t)
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	svc := func(port string) string {
		return "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc\nspec:\n  ports:\n  - port: " + port + "\n"
	}
	v1 := map[string]string{"cm.yaml": cmFile("cm", "v1")["cm.yaml"], "svc.yaml": svc("80")}
	v2 := map[string]string{"cm.yaml": cmFile("cm", "v2")["cm.yaml"], "svc.yaml": svc("99999")}
	first, err := deployFiles(t, d, "revert", v1, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deployFiles(t, d, "revert", v2, opts); err == nil {
		t.Fatal("upgrade with an invalid Service port succeeded")
	}
	cm, err := d.core.ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["k"] != "v2" {
		t.Fatalf("the failed upgrade left k=%q; the test needs it to have applied the ConfigMap", cm.Data["k"])
	}

	restarted, err := New(downstream(t).Config, testAgentNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := restarted.Current(context.Background(), "revert", opts); err != nil || cur != nil {
		t.Fatalf("Current after a failed upgrade = %v (%v), want none (revision %s was deployed before it)", cur, err, first)
	}

	rel, err := deployFiles(t, restarted, "revert", v1, opts)
	if err != nil {
		t.Fatalf("redeploying v1: %v", err)
	}
	if cm, err = d.core.ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{}); err != nil || cm.Data["k"] != "v1" {
		t.Fatalf("after redeploying v1: ConfigMap %v (%v), want k=v1", cm.Data, err)
	}
	cur, err := restarted.Current(context.Background(), "revert", opts)
	if err != nil || cur == nil || cur.Version != rel.Version || cur.DeploymentID != first.DeploymentID {
		t.Fatalf("Current after redeploying v1 = %v (%v), want revision %d of %q", cur, err, rel.Version, first.DeploymentID)
	}
}
