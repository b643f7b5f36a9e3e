package drift

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/fleetgo/fleet/internal/agent/deployer"
)

// flakyDiscovery is a reverse proxy to the package's API server through
// which the watcher discovers kinds; broken makes it answer 503, as an
// overloaded or unreachable API server (or aggregated API) does.
type flakyDiscovery struct {
	broken atomic.Bool
	failed atomic.Int64 // requests answered 503
}

func (f *flakyDiscovery) start(t *testing.T, cfg *rest.Config) *rest.Config {
	t.Helper()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: tr,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.broken.Load() {
			f.failed.Add(1)
			http.Error(w, "discovery unavailable", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

// logLines collects what a logger with verbosity 1 writes, as JSON.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.NewJSON(func(s string) {
		l.mu.Lock()
		l.lines = append(l.lines, s)
		l.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

// matching are the lines containing every one of parts.
func (l *logLines) matching(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, s := range l.lines {
		for _, p := range parts {
			if !strings.Contains(s, p) {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// TestRetryLogsMappingErrorsPerKind: while discovery fails, the background
// attempts to follow custom resources whose kind was unknown cannot tell
// whether the kind exists yet. That used to be silent; it is logged at V(1)
// with the kind and the error, never the objects' contents, once per kind
// (not once per deployment and attempt: the attempts repeat every few
// seconds, and at once after every deploy).
func TestRetryLogsMappingErrorsPerKind(t *testing.T) {
	c := apiServer(t)
	var disc flakyDiscovery
	discCfg := disc.start(t, c.Config)
	mapperDisc, err := deployer.NewDiscovery(discCfg)
	if err != nil {
		t.Fatal(err)
	}
	var logs logLines
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), logs.logger()))
	t.Cleanup(cancel)
	w, err := NewWatcher(ctx, WatcherOptions{Config: c.Config, Label: "drift-retrylog", Mapper: mapperDisc.RESTMapper(),
		Notify: func(types.NamespacedName) {}})
	if err != nil {
		t.Fatal(err)
	}

	const secret = "retrylog-secret-value"
	custom := func(group, kind, name string) *unstructured.Unstructured {
		return obj(t, fmt.Sprintf(`apiVersion: %s/v1
kind: %s
metadata: {name: %s, namespace: drift-retrylog}
spec: {password: %s}
`, group, kind, name, secret))
	}
	// Two deployments of one unknown kind, one of another: none of these
	// CRDs exists, so all three are pending.
	bds := map[types.NamespacedName]*unstructured.Unstructured{
		{Namespace: "cluster-a", Name: "first"}:  custom("retrylog-a.example.com", "Widget", "w1"),
		{Namespace: "cluster-a", Name: "second"}: custom("retrylog-a.example.com", "Widget", "w2"),
		{Namespace: "cluster-a", Name: "third"}:  custom("retrylog-b.example.com", "Gadget", "g1"),
	}
	for bd, o := range bds {
		if err := w.Watch(bd, []*unstructured.Unstructured{o}); err != nil {
			t.Fatalf("watch %s: %v", bd, err)
		}
	}

	disc.broken.Store(true)
	w.retrySoon(true)
	kindA, kindB := "retrylog-a.example.com/v1, Kind=Widget", "retrylog-b.example.com/v1, Kind=Gadget"
	eventually(t, "mapping errors logged", func() error {
		if len(logs.matching(kindA)) == 0 || len(logs.matching(kindB)) == 0 {
			return fmt.Errorf("log lines: %q", logs.matching())
		}
		return nil
	})

	// More attempts, each seen failing at the proxy; an attempt's logging
	// is done once the next attempt asks for discovery.
	for range 3 {
		before := disc.failed.Load()
		w.retrySoon(true)
		eventually(t, "another attempt", func() error {
			if disc.failed.Load() == before {
				return fmt.Errorf("no discovery request since %d", before)
			}
			return nil
		})
	}
	for _, k := range []string{kindA, kindB} {
		got := logs.matching(k)
		if len(got) != 1 {
			t.Fatalf("kind %s logged %d times over 4 or more attempts, want once: %q", k, len(got), got)
		}
		// A 503 is "the server is currently unable to handle the request".
		if !strings.Contains(got[0], `"level":1`) || !strings.Contains(got[0], "unable to handle the request") {
			t.Errorf("line is not at V(1) or lacks the error: %s", got[0])
		}
	}
	if leaked := logs.matching(secret); len(leaked) > 0 {
		t.Fatalf("object contents logged: %q", leaked)
	}
}
