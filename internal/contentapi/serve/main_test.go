package serve

import (
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/testenv"
)

// up is a real API server with the Fleet CRDs and an aggregation layer, for
// the tests whose subject is what the API server receives or serves (the
// live fallback's reads, the request-header CA the readiness check waits
// for). The HTTP-layer tests of this package do not use it.
var up *testenv.Cluster

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	var err error
	if up, err = testenv.Start(testenv.Options{Name: "content-api-serve"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = up.Stop()
	os.Exit(code)
}
