package bundlereader

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// TestChartFetchLeavesNoIdleConnection: once a bundle is read, the
// connections its chart downloads opened are closed. Each read has its
// own transport, so an idle connection left behind would never be used
// again, yet hold a socket and two goroutines until the idle timeout; a
// GitRepo with many Helm-chart bundles would pile them up at every sync.
func TestChartFetchLeavesNoIdleConnection(t *testing.T) {
	tgz := helmrepo.Chart(t, "mychart", "1.0.0")
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	allClosed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(tgz)
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
			if len(open) == 0 {
				select {
				case allClosed <- struct{}{}:
				default:
				}
			}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + srv.URL + "/mychart-1.0.0.tgz\n"})
	b, err := readOne(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustHaveChart(t, b, b.Spec.Helm, "mychart", "1.0.0")

	mu.Lock()
	n := len(open)
	mu.Unlock()
	if n == 0 {
		return
	}
	// The client closed its end; the server notices when its read ends.
	// Without the close the connection idles for the transport's 90 s, far
	// beyond this bound.
	select {
	case <-allClosed:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d connection(s) to the chart server still open after the bundle was read", n)
	}
}
