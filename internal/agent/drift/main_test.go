package drift

import (
	"os"
	"sync"
	"testing"

	"github.com/fleetgo/fleet/internal/testenv"
)

// The package's one API server, started by the first test that needs it
// (each works in objects or a namespace of its own). Not in TestMain: a fuzz
// worker (FuzzDiff) runs TestMain too, and must not boot an API server.
var (
	apiServerOnce sync.Once
	apiServerEnv  *testenv.Cluster
	apiServerErr  error
)

func apiServer(t *testing.T) *testenv.Cluster {
	t.Helper()
	apiServerOnce.Do(func() {
		apiServerEnv, apiServerErr = testenv.Start(testenv.Options{Name: "drift", WithoutCRDs: true})
	})
	if apiServerErr != nil {
		t.Fatal(apiServerErr)
	}
	return apiServerEnv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if apiServerEnv != nil {
		_ = apiServerEnv.Stop()
	}
	os.Exit(code)
}
