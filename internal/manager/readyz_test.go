package manager

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetgo/fleet/internal/contentapi/serve"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestReadyzIncludesContentAPI: with the content API on, the manager's
// /readyz (the pod's readiness probe, on the probes port) includes the
// content API's check, which passes once the server can authenticate the
// aggregation layer (what it waits for is tested in package serve); with
// the content API off there is no such check and the manager is ready
// without it.
func TestReadyzIncludesContentAPI(t *testing.T) {
	for _, tc := range []struct {
		name       string
		contentAPI serve.Options
		want       int
	}{
		{name: "content API on", want: http.StatusOK},
		{name: "content API off", contentAPI: serve.Options{Addr: "0"}, want: http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeAddr(t)
			ctx, cancel := context.WithCancel(context.Background())
			mgr, err := New(ctx, up.Config, Options{MetricsAddr: "0", ProbeAddr: addr, WebhookAddr: "0", ContentAPI: tc.contentAPI})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := mgr.Start(ctx); err != nil {
					t.Errorf("manager: %v", err)
				}
			}()
			defer wg.Wait()
			defer cancel()

			get := func(path string) (int, string, error) {
				resp, err := http.Get("http://" + addr + path)
				if err != nil {
					return 0, "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), err
			}
			eventually(t, 2*time.Minute, func() error {
				code, body, err := get("/readyz/content-api")
				if err != nil {
					return err
				}
				if code != tc.want {
					return fmt.Errorf("/readyz/content-api: %d %q, want %d", code, body, tc.want)
				}
				if code, body, err = get("/readyz?verbose"); err != nil || code != http.StatusOK {
					return fmt.Errorf("/readyz: %d %q %v, want ready", code, body, err)
				}
				if on := strings.Contains(body, "content-api ok"); on != (tc.want == http.StatusOK) {
					return fmt.Errorf("/readyz?verbose lists the content API's check: %v, want %v (%q)", on, !on, body)
				}
				return nil
			})
		})
	}
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// eventually is fleettest.Eventually, under the name this package's tests
// use.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	fleettest.Eventually(t, timeout, f)
}
