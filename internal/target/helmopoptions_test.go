package target

import (
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestHelmOpOptionsDoNotChangeDeploymentID: spec.helmOpOptions is accepted
// for compatibility with Rancher Fleet and not acted on, so it must not reach
// BundleDeployment options, and adding the field must not redeploy existing
// bundles: their deploymentIDs are pinned here as computed before the field
// existed.
func TestHelmOpOptionsDoNotChangeDeploymentID(t *testing.T) {
	want := map[string]string{
		"dev":  "s-0123456789abcdef:60c3bc682d1a9757e91e52924ac44b0bc3e2e214c8f74ef9f9e15829120e0c0f",
		"prod": "s-0123456789abcdef:6f73bf8f0f82bd3ad8422dcba23a8ddf49918e09da76d0680d078408701bbc0f",
	}
	in := benchInput(2, map[string]interface{}{"replicas": int64(2)})
	check := func(name string) {
		t.Helper()
		all, err := Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != len(want) {
			t.Fatalf("%s: %d targets, want %d", name, len(all), len(want))
		}
		for _, tg := range all {
			env := tg.Cluster.Labels["env"]
			if tg.DeploymentID != want[env] {
				t.Errorf("%s: %s deploymentID %s, want %s", name, env, tg.DeploymentID, want[env])
			}
		}
	}
	check("without helmOpOptions")
	in.Bundle.Spec.HelmOpOptions = &fleet.BundleHelmOpOptions{
		SecretName: "helm-creds", InsecureSkipTLSverify: true, CABundle: []byte("-----BEGIN CERTIFICATE-----"),
	}
	check("with helmOpOptions")
}
