package simulator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/manifest"
)

// TestValuesOverloadRetriedShortly: like the real agent, a simulated one
// whose values Secret read is refused with 429 Too Many Requests (its
// Content read answered) counts no failure of the deployment and reads
// again after a short fixed wait.
func TestValuesOverloadRetriedShortly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := manifest.New([]fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := m.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	var secretReads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.Contains(req.URL.Path, "/secrets/") {
			secretReads.Add(1)
			http.Error(w, "busy in this test", http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(contentapi.BundleContent{Content: data})
	}))
	defer srv.Close()
	s := &Simulator{opts: Options{Count: 1, Bootstrap: &register.Bootstrap{APIServerURL: srv.URL}}}
	if err := s.opts.defaults(); err != nil {
		t.Fatal(err)
	}
	if s.fleetClient, err = sharedClient(s.opts.Bootstrap, http.DefaultTransport, "/apis", &fleet.GroupVersion); err != nil {
		t.Fatal(err)
	}
	if s.coreClient, err = sharedClient(s.opts.Bootstrap, http.DefaultTransport, "/api", &corev1.SchemeGroupVersion); err != nil {
		t.Fatal(err)
	}
	s.contents = &contentapi.Reader{REST: s.fleetClient}
	a := newAgent(s, 0)
	a.done = ctx.Done()

	bd := bundleDeployment("bd", "s-1:1")
	bd.Spec.ValuesHash = "0123"
	a.handle(ctx, &bd)
	if secretReads.Load() == 0 {
		t.Fatal("the values Secret was not read")
	}
	a.mu.Lock()
	n := a.failures["bd"]
	a.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d failures counted for an overloaded API server, want none", n)
	}
	select {
	case name := <-a.retries:
		if name != "bd" {
			t.Fatalf("retried %q", name)
		}
	case <-time.After(time.Minute):
		t.Fatal("no retry within a minute")
	}
}
