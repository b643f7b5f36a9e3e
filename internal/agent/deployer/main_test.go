package deployer

import (
	"context"
	"os"
	"sync"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv"
)

// The package's one downstream API server, started by the first test that
// needs it (each works in a namespace of its own). Not in TestMain: a fuzz
// worker (FuzzWriteAll) runs TestMain too, and must not boot an API server.
var (
	downstreamOnce sync.Once
	downstreamEnv  *testenv.Cluster
	downstreamErr  error
)

func downstream(t *testing.T) *testenv.Cluster {
	t.Helper()
	downstreamOnce.Do(func() {
		downstreamEnv, downstreamErr = testenv.Start(testenv.Options{Name: "deployer-down", WithoutCRDs: true, WithoutAggregationLayer: true})
	})
	if downstreamErr != nil {
		t.Fatal(downstreamErr)
	}
	return downstreamEnv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if downstreamEnv != nil {
		_ = downstreamEnv.Stop()
	}
	os.Exit(code)
}

// testAgentNamespace is the agent namespace of the Deployers the tests make;
// it does not need to exist (no fleet-default ServiceAccount in it).
const testAgentNamespace = "cattle-fleet-system"

// newTestDeployer is a Deployer for the downstream API server, as the agent
// makes one with its own identity there.
func newTestDeployer(t *testing.T) *Deployer {
	t.Helper()
	d, err := New(downstream(t).Config, testAgentNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// deployFiles deploys a bundle of files with opts, as the agent does for a
// BundleDeployment named name.
func deployFiles(t *testing.T, d *Deployer, name string, files map[string]string, opts fleet.BundleDeploymentOptions) (*Release, error) {
	t.Helper()
	m := mf(t, files)
	id, err := m.ID()
	if err != nil {
		t.Fatal(err)
	}
	return d.Deploy(context.Background(), Input{Name: name, DeploymentID: id, Options: opts, Manifest: m})
}
