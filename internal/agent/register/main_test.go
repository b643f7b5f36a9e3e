package register

import (
	"os"
	"sync"
	"testing"

	"github.com/fleetgo/fleet/internal/testenv"
)

// The package's one API server, started by the first test that needs it
// (each works in a namespace of its own). Not in TestMain: a fuzz worker
// runs TestMain too, and must not boot an API server.
var (
	upstreamOnce sync.Once
	upstreamEnv  *testenv.Cluster
	upstreamErr  error
)

func upstream(t *testing.T) *testenv.Cluster {
	t.Helper()
	upstreamOnce.Do(func() {
		upstreamEnv, upstreamErr = testenv.Start(testenv.Options{Name: "register", WithoutAggregationLayer: true})
	})
	if upstreamErr != nil {
		t.Fatal(upstreamErr)
	}
	return upstreamEnv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if upstreamEnv != nil {
		_ = upstreamEnv.Stop()
	}
	os.Exit(code)
}
