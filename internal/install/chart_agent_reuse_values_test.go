package install_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/testenv"
)

// olderAgentChartValues are the values.yaml of a fleet-agent chart from
// before most of today's keys (metrics, agent.*, leaderElection,
// fleetAgent, agentConfig, agentTLSMode...) were added.
const olderAgentChartValues = `image:
  repository: ghcr.io/fleetgo/fleet-agent
  tag: ""
apiServerURL: ""
apiServerCA: ""
token: ""
tokenName: ""
clusterNamespace: ""
systemRegistrationNamespace: cattle-fleet-clusters-system
labels: {}
clientID: ""
garbageCollectionInterval: 15m
global:
  cattle:
    systemDefaultRegistry: ""
internal:
  systemNamespace: cattle-fleet-system
  managedReleaseName: fleet-agent
`

// TestAgentChartUpgradeFromOlderValues: `helm upgrade fleet-agent
// --reset-then-reuse-values`, which docs/registration.md recommends, and
// also `--reuse-values`, which renders the new chart with the older
// chart's values (lacking every key added since), upgrade an agent
// installed from an older chart: the real helm CLI against a real API
// server, the Deployment read back with the defaults for the missing keys
// and the values given at install kept.
func TestAgentChartUpgradeFromOlderValues(t *testing.T) {
	cl, err := testenv.Start(testenv.Options{Name: "install-agent-reuse", WithoutCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop() })
	// Only the values matter: an upgrade renders the new chart's templates.
	older := t.TempDir()
	if err := os.CopyFS(older, os.DirFS(filepath.Join(testenv.RepoRoot(), "charts", "fleet-agent"))); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(older, "templates")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(older, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(older, "values.yaml"), []byte(olderAgentChartValues), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		if _, err := helm(t, append([]string{"--kubeconfig", cl.Kubeconfig, "-n", "cattle-fleet-system"}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	for _, flag := range []string{"--reset-then-reuse-values", "--reuse-values"} {
		t.Run(flag, func(t *testing.T) {
			run("install", "--create-namespace", "fleet-agent", older, "--set", "apiServerURL=https://upstream.example:6443",
				"--set", "token=t", "--set", "tokenName=n", "--set-string", "labels.env=dev")
			defer run("uninstall", "fleet-agent")
			run("upgrade", "fleet-agent", filepath.Join(testenv.RepoRoot(), "charts", "fleet-agent"), flag, "--set", "image.tag=v0.2.0")

			d := &appsv1.Deployment{}
			if err := cl.Client.Get(context.Background(), client.ObjectKey{Namespace: "cattle-fleet-system", Name: "fleet-agent"}, d); err != nil {
				t.Fatal(err)
			}
			c := container(t, d)
			env := envOf(c)
			if c.Image != "ghcr.io/fleetgo/fleet-agent:v0.2.0" {
				t.Errorf("image %q", c.Image)
			}
			for k, want := range map[string]string{"CATTLE_ELECTION_LEASE_DURATION": "30s", "CATTLE_ELECTION_RENEW_DEADLINE": "25s",
				"CATTLE_ELECTION_RETRY_PERIOD": "10s", "BUNDLEDEPLOYMENT_RECONCILER_WORKERS": "50"} {
				if env[k] != want {
					t.Errorf("%s=%q, want %q", k, env[k], want)
				}
			}
			if _, ok := env["FLEET_AGENT_METRICS_BIND_ADDRESS"]; ok {
				t.Errorf("metrics enabled by an upgrade: %v", env)
			}
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
				t.Errorf("replicas %v", d.Spec.Replicas)
			}
		})
	}
}
