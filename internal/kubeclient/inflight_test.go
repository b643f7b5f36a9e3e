package kubeclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetgo/fleet/internal/kubeclient"
)

// TestLimitInFlight sends many requests at once through a limited client:
// the server never sees more than the limit at a time, every request
// succeeds, and a watch and a Lease request are let through while the
// limit is taken.
func TestLimitInFlight(t *testing.T) {
	const limit = 5
	var now, peak atomic.Int32
	release := make(chan struct{})
	exemptSeen := make(chan struct{}, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" || strings.HasPrefix(r.URL.Path, "/apis/coordination.k8s.io/") {
			exemptSeen <- struct{}{}
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Query().Get("watch") != "true" {
				_, _ = w.Write([]byte(`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l"}}`))
			}
			return
		}
		n := now.Add(1)
		defer now.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"}}`))
	}))
	defer srv.Close()

	cfg := &rest.Config{Host: srv.URL, QPS: -1}
	kubeclient.LimitInFlight(cfg, limit)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "x", metav1.GetOptions{})
			errs <- err
		}()
	}
	// Wait until the limit is reached, then check that a watch still goes.
	for now.Load() < limit {
		time.Sleep(10 * time.Millisecond)
	}
	go func() {
		w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
		if err == nil {
			w.Stop()
		}
	}()
	go func() { _, _ = cs.CoordinationV1().Leases("kube-system").Get(ctx, "l", metav1.GetOptions{}) }()
	for _, what := range []string{"a watch", "a Lease request"} {
		select {
		case <-exemptSeen:
		case <-time.After(10 * time.Second):
			t.Errorf("%s waited behind the limited requests", what)
		}
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("request failed: %v", err)
		}
	}
	if p := peak.Load(); p > limit {
		t.Errorf("the server saw %d requests at once, want at most %d", p, limit)
	}
	if p := peak.Load(); p < limit {
		t.Errorf("the server saw at most %d requests at once, want the limit %d used", p, limit)
	}
}
