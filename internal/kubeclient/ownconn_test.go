package kubeclient

import (
	"net/http"
	"testing"

	"k8s.io/client-go/rest"
)

func TestOwnConnectionGetsAnUnsharedTransport(t *testing.T) {
	cfg := &rest.Config{Host: "https://example.invalid:6443", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	rt := func(c *rest.Config) http.RoundTripper {
		t.Helper()
		hc, err := rest.HTTPClientFor(c)
		if err != nil {
			t.Fatal(err)
		}
		return unwrap(hc.Transport)
	}
	shared1, shared2 := rt(cfg), rt(rest.CopyConfig(cfg))
	if shared1 != shared2 {
		t.Fatalf("precondition: client-go should share one transport between equal configs")
	}
	own1, own2 := rt(OwnConnection(cfg)), rt(OwnConnection(cfg))
	if own1 == shared1 || own2 == shared1 || own1 == own2 {
		t.Fatalf("OwnConnection transports are shared: own1==shared %v, own2==shared %v, own1==own2 %v",
			own1 == shared1, own2 == shared1, own1 == own2)
	}
	if cfg.Proxy != nil {
		t.Fatalf("OwnConnection changed the config it was given")
	}
}

// unwrap returns the innermost round tripper under client-go's wrappers.
func unwrap(rt http.RoundTripper) http.RoundTripper {
	for {
		w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper })
		if !ok {
			return rt
		}
		rt = w.WrappedRoundTripper()
	}
}
