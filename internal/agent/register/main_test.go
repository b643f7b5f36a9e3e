package register

import (
	"fmt"
	"os"
	"testing"

	"github.com/fleetgo/fleet/internal/testenv"
)

// upstream is the package's one API server; each test works in a
// namespace of its own.
var upstream *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	upstream, err = testenv.Start(testenv.Options{Name: "register", WithoutAggregationLayer: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = upstream.Stop() }()
	return m.Run()
}
