package serve

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/pki"
	"github.com/fleetgo/fleet/internal/scheme"
)

// heldRead holds the API server requests of one path (GET) until release
// is closed, and counts them.
type heldRead struct {
	path        string
	calls       atomic.Int32
	entered     chan struct{}
	release     chan struct{}
	enterOnce   sync.Once
	releaseOnce sync.Once
}

func newHeldRead(path string) *heldRead {
	return &heldRead{path: path, entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldRead) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodGet && r.URL.Path == h.path {
			h.calls.Add(1)
			h.enterOnce.Do(func() { close(h.entered) })
			<-h.release
		}
		return rt.RoundTrip(r)
	})
}

func (h *heldRead) free() { h.releaseOnce.Do(func() { close(h.release) }) }

// served is what the content API answered one waiter, once its handler
// returned.
type served struct {
	waiter string
	code   int
}

type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// waiterHeader names the test's waiter in a request.
const waiterHeader = "X-Test-Waiter"

// contentServer serves h over HTTPS, as behind the aggregation layer: it
// returns the server and a client with the aggregation layer's client
// certificate. Every request's waiter goes to arrived when the server
// receives it, and its answer to done once its handler returned.
func contentServer(t *testing.T, h *handler) (*httptest.Server, *http.Client, <-chan string, <-chan served) {
	t.Helper()
	frontCA, err := pki.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := frontCA.Issue(pki.Leaf{CommonName: pki.FrontProxyClientName, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(frontCA.Cert)
	h.proxy.Store(&frontProxy{pool: pool})
	arrived, done := make(chan string, 16), make(chan served, 16)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Header.Get(waiterHeader)
		cw := &codeWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(cw, r)
		done <- served{waiter: r.Header.Get(waiterHeader), code: cw.code}
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c := srv.Client()
	c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{clientCert}
	return srv, c, arrived, done
}

// getContent asks srv for Content name of ns as waiter, for deployment bd.
func getContent(ctx context.Context, c *http.Client, srv *httptest.Server, waiter, ns, name, bd string) (int, *contentapi.BundleContent, error) {
	url := srv.URL + "/apis/" + contentapi.Group + "/" + contentapi.Version + "/namespaces/" + ns + "/bundlecontents/" + name
	if bd != "" {
		url += "?" + contentapi.DeploymentParam + "=" + bd
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set(waiterHeader, waiter)
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, err
	}
	bc := &contentapi.BundleContent{}
	return resp.StatusCode, bc, json.Unmarshal(b, bc)
}

// answerOf waits for the content API's answer to waiter; it fails the
// test if none comes while the shared read is held (the waiter is blocked
// on it).
func answerOf(t *testing.T, done <-chan served, waiter string) served {
	t.Helper()
	deadline := time.After(10 * time.Second) // far less than liveReadTimeout
	for {
		select {
		case s := <-done:
			if s.waiter == waiter {
				return s
			}
		case <-deadline:
			t.Fatalf("waiter %s still blocked on the shared read after its request ended", waiter)
		}
	}
}

// TestSharedReadWaiterLeavesWithItsRequest: an agent whose request ends
// while the API server read it shares with others is slow is answered at
// once (its handler returns, freeing its goroutine), not when the read
// ends; the read goes on and still answers the agents that wait for it.
// For each read the server shares: the Content, the deployment the agent
// names, the namespace's LIST when it names none.
func TestSharedReadWaiterLeavesWithItsRequest(t *testing.T) {
	ctx := context.Background()
	sfx := suffix(t)
	ns := "flight-waiter" + sfx
	if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	deployments := "/apis/" + fleet.GroupVersion.Group + "/" + fleet.GroupVersion.Version + "/namespaces/" + ns + "/bundledeployments"
	for _, tc := range []struct {
		name, content, bd, hint, held string
		cached                        bool
	}{
		{name: "Content read", content: "s-waiter-content" + sfx, bd: "cached", hint: "cached", cached: true,
			held: "/apis/" + fleet.GroupVersion.Group + "/" + fleet.GroupVersion.Version + "/contents/s-waiter-content" + sfx},
		{name: "deployment read", content: "s-waiter-bd" + sfx, bd: "fresh-bd", hint: "fresh-bd", held: deployments + "/fresh-bd"},
		{name: "namespace LIST", content: "s-waiter-list" + sfx, bd: "fresh-list", held: deployments},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tc.bd},
				Spec: fleet.BundleDeploymentSpec{DeploymentID: tc.content + ":options"}}
			if tc.cached {
				bd.Labels = map[string]string{cachedLabel: "true"}
			}
			for _, o := range []client.Object{bd, &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: tc.content}, Content: []byte(tc.content)}} {
				if err := up.Client.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			cache := laggingCache(t)
			// The other waiter may, rarely, reach the server only after the
			// shared read (then it reads on its own): try again.
			for attempt := 0; attempt < 5; attempt++ {
				if sharedReadOutlivesWaiter(t, cache, tc.held, ns, tc.content, tc.hint) {
					return
				}
				t.Logf("attempt %d: the waiters did not share one read", attempt)
			}
			t.Fatal("the two waiters never shared one read")
		})
	}
}

// sharedReadOutlivesWaiter runs one attempt of
// TestSharedReadWaiterLeavesWithItsRequest; it returns false if the two
// waiters did not share one read.
func sharedReadOutlivesWaiter(t *testing.T, cache client.Reader, held, ns, content, hint string) bool {
	hold := newHeldRead(held)
	cfg := rest.CopyConfig(up.Config)
	cfg.Wrap(hold.wrap)
	live, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	srv, c, arrived, done := contentServer(t, &handler{cache: cache, live: live})
	t.Cleanup(hold.free) // before the server closes: it waits for its handlers

	gone, leave := context.WithCancel(context.Background())
	defer leave()
	go func() { _, _, _ = getContent(gone, c, srv, "gone", ns, content, hint) }()
	select {
	case <-hold.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the API server")
	}
	type result struct {
		code int
		bc   *contentapi.BundleContent
		err  error
	}
	stays := make(chan result, 1)
	go func() {
		code, bc, err := getContent(context.Background(), c, srv, "stays", ns, content, hint)
		stays <- result{code: code, bc: bc, err: err}
	}()
	// The other agent reaches the server (and, but rarely, the read) before
	// the first gives up.
	for w := <-arrived; w != "stays"; w = <-arrived {
	}
	leave() // the first agent gives up while the read is held

	// Its handler returns while the read is still held: only then is the
	// read let through.
	if a := answerOf(t, done, "gone"); a.code != http.StatusInternalServerError {
		t.Errorf("the request that gave up was answered %d, want %d (its context's error)", a.code, http.StatusInternalServerError)
	}
	hold.free()
	r := <-stays
	if r.err != nil || r.code != http.StatusOK || string(r.bc.Content) != content {
		t.Fatalf("the agent still waiting got %d, %v, %v; want the Content despite the other's cancelled request", r.code, r.bc, r.err)
	}
	return hold.calls.Load() == 1
}

// TestContentReadFillsCacheAfterEveryWaiterLeft: the shared read of a
// Content keeps the Content for later requests even when every request
// that waited for it has gone.
func TestContentReadFillsCacheAfterEveryWaiterLeft(t *testing.T) {
	ctx := context.Background()
	sfx := suffix(t)
	ns, content := "flight-all-gone"+sfx, "s-all-gone"+sfx
	bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: map[string]string{cachedLabel: "true"}},
		Spec: fleet.BundleDeploymentSpec{DeploymentID: content + ":options"}}
	for _, o := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, bd,
		&fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: content}, Content: []byte(content)}} {
		if err := up.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	hold := newHeldRead("/apis/" + fleet.GroupVersion.Group + "/" + fleet.GroupVersion.Version + "/contents/" + content)
	cfg := rest.CopyConfig(up.Config)
	cfg.Wrap(hold.wrap)
	live, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{cache: laggingCache(t), live: live}
	srv, c, _, done := contentServer(t, h)
	t.Cleanup(hold.free) // before the server closes: it waits for its handlers

	gone, leave := context.WithCancel(ctx)
	go func() { _, _, _ = getContent(gone, c, srv, "gone", ns, content, "app") }()
	<-hold.entered
	leave()
	answerOf(t, done, "gone")
	hold.free()
	// The read ends on its own: wait for it to keep the Content.
	for deadline := time.Now().Add(10 * time.Second); !h.contents.has(content); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the read every waiter left did not keep the Content")
		}
	}
	code, bc, err := getContent(ctx, c, srv, "later", ns, content, "app")
	if err != nil || code != http.StatusOK || string(bc.Content) != content {
		t.Fatalf("a later request got %d, %v, %v; want the Content", code, bc, err)
	}
	if n := hold.calls.Load(); n != 1 {
		t.Errorf("%d reads of the Content, want 1 (the later request is answered from the cache)", n)
	}
}

// has reports whether the cache keeps Content name.
func (c *contentCache) has(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.items[name]
	return ok
}

// suffix makes the names of one run unique on the shared API server (for
// -count).
func suffix(t *testing.T) string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "-" + hex.EncodeToString(b)
}
