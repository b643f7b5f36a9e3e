package bundlereader

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleetgo/fleet/internal/testenv/conntrack"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// TestChartFetchLeavesNoIdleConnection: once a bundle is read, the
// connections its chart downloads opened are closed. Each read has its
// own transport, so an idle connection left behind would never be used
// again, yet hold a socket and two goroutines until the idle timeout; a
// GitRepo with many Helm-chart bundles would pile them up at every sync.
func TestChartFetchLeavesNoIdleConnection(t *testing.T) {
	tgz := helmrepo.Chart(t, "mychart", "1.0.0")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(tgz)
	}))
	conns := conntrack.Track(srv)
	srv.Start()
	t.Cleanup(srv.Close)

	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + srv.URL + "/mychart-1.0.0.tgz\n"})
	b, err := readOne(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustHaveChart(t, b, b.Spec.Helm, "mychart", "1.0.0")

	conns.WaitClosed(t, 20*time.Second, "the chart server after the bundle was read")
}
