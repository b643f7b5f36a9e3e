package kubeclient

import (
	"net/http"

	"k8s.io/client-go/rest"
)

// OwnConnection returns a copy of cfg whose clients get a transport, hence
// an HTTP/2 connection, that no client built from another config shares.
//
// client-go caches transports by TLS settings, so every client of one
// identity multiplexes its requests and watch streams on a single
// connection, which the API server serves through one goroutine. A watch
// that receives thousands of events while the same process writes
// thousands of objects then falls behind, and the API server closes it as
// unresponsive. A config with a Proxy function is never cached; the one set
// here is what the shared transport uses anyway.
func OwnConnection(cfg *rest.Config) *rest.Config {
	own := rest.CopyConfig(cfg)
	if own.Proxy == nil {
		own.Proxy = http.ProxyFromEnvironment
	}
	return own
}
