// Package kubeclient holds what Fleet's own clients of the Kubernetes API
// need beyond client-go's defaults.
package kubeclient

import (
	"net/http"
	"strings"

	"k8s.io/client-go/rest"
)

// DefaultMaxInFlight is the number of requests (watches and Leases
// excepted) a client keeps in flight by default. A kube-apiserver allows
// 100 concurrent streams per HTTP/2 connection unless
// --http2-max-streams-per-connection says otherwise; the rest is left for
// the client's watches.
const DefaultMaxInFlight = 64

// LimitInFlight makes cfg's clients wait before sending a request while n
// others are in flight; n <= 0 means DefaultMaxInFlight. Watches and
// leader-election Leases are never held back: a watch holds its stream for
// minutes, and a Lease renewal must not queue behind a burst of writes.
//
// Why: client-go sends everything over one HTTP/2 connection. Once that
// connection's streams are all taken, Go's HTTP client dials a new TLS
// connection for every request that has to wait, and closes most of them
// again as soon as a stream frees up. In a 50-bundle rollout the manager
// made about 700 TLS handshakes within a second this way (12 % of its CPU,
// and more of the API server's) instead of queueing a few requests for a
// few milliseconds (docs/scale.md).
func LimitInFlight(cfg *rest.Config, n int) {
	if n <= 0 {
		n = DefaultMaxInFlight
	}
	sem := make(chan struct{}, n)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &inFlight{base: rt, sem: sem}
	})
}

type inFlight struct {
	base http.RoundTripper
	sem  chan struct{}
}

func (t *inFlight) RoundTrip(req *http.Request) (*http.Response, error) {
	if exempt(req) {
		return t.base.RoundTrip(req)
	}
	select {
	case t.sem <- struct{}{}:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		<-t.sem
		return resp, err
	}
	// The stream stays open until the body is read and closed.
	resp.Body = &releaseOnClose{ReadCloser: resp.Body, release: func() { <-t.sem }}
	return resp, nil
}

// WrappedRoundTripper lets client-go's debugging and cancellation helpers
// see through this layer.
func (t *inFlight) WrappedRoundTripper() http.RoundTripper { return t.base }

func exempt(req *http.Request) bool {
	if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
		return true
	}
	return strings.HasPrefix(req.URL.Path, "/apis/coordination.k8s.io/")
}
