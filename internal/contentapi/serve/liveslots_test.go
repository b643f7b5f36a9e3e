package serve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/scheme"
)

// TestLiveReadsCapped: with every slot for reads of the API server taken
// by reads the API server holds, a request for another object the cache
// lacks is answered 429 with Retry-After instead of starting one more
// read; the agent's own client retries that by itself, and is served
// once a slot is free. The held reads are served in the end.
func TestLiveReadsCapped(t *testing.T) {
	ctx := context.Background()
	sfx := suffix(t)
	ns := "live-slots" + sfx
	if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// No deployment is in the cache: each request reads its deployment
	// from the API server.
	contents := map[string]string{"held-1": "s-held-1" + sfx, "held-2": "s-held-2" + sfx, "fresh": "s-fresh" + sfx}
	for bd, content := range contents {
		for _, o := range []client.Object{
			&fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: bd},
				Spec: fleet.BundleDeploymentSpec{DeploymentID: content + ":options"}},
			&fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: content}, Content: []byte(content)},
		} {
			if err := up.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	deployments := "/apis/" + fleet.GroupVersion.Group + "/" + fleet.GroupVersion.Version + "/namespaces/" + ns + "/bundledeployments/"
	hold1, hold2 := newHeldRead(deployments+"held-1"), newHeldRead(deployments+"held-2")
	cfg := rest.CopyConfig(up.Config)
	cfg.Wrap(hold1.wrap)
	cfg.Wrap(hold2.wrap)
	live, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{cache: laggingCache(t), live: live}
	h.liveSlots.size = 2
	srv, c, arrived, done := contentServer(t, h)
	t.Cleanup(hold1.free) // before the server closes: it waits for its handlers
	t.Cleanup(hold2.free)
	drain(t, arrived)

	held := map[string]chan int{}
	for _, bd := range []string{"held-1", "held-2"} {
		held[bd] = make(chan int, 1)
		go func() {
			code, _, _ := getContent(ctx, c, srv, bd, ns, contents[bd], bd)
			held[bd] <- code
		}()
	}
	for _, h := range []*heldRead{hold1, hold2} {
		select {
		case <-h.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("a held read never reached the API server")
		}
	}

	// Both slots are taken: a third object is not read.
	code, retry := getStatus(t, c, srv, ns, contents["fresh"], "fresh")
	assertBusy(t, "with every read slot taken", code, retry)

	// The agent's client retries the 429 by itself, and is served once
	// a held read frees its slot.
	rc, err := contentapi.NewRESTClient(&rest.Config{Host: srv.URL}, c)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		content []byte
		err     error
	}
	agent := make(chan result, 1)
	go func() {
		b, _, err := (&contentapi.Reader{REST: rc}).Get(ctx, ns, contents["fresh"], "fresh")
		agent <- result{content: b, err: err}
	}()
	waitAnswer(t, done, "", http.StatusTooManyRequests)
	hold1.free()
	if code := <-held["held-1"]; code != http.StatusOK {
		t.Errorf("request whose read was held: %d, want 200", code)
	}
	select {
	case r := <-agent:
		if r.err != nil || string(r.content) != contents["fresh"] {
			t.Fatalf("agent's read once a slot is free: %q, %v; want the Content", r.content, r.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the agent's read was not served once a slot was free")
	}
	drain(t, done)
	hold2.free()
	if code := <-held["held-2"]; code != http.StatusOK {
		t.Errorf("request whose read was held: %d, want 200", code)
	}
}

// getStatus asks srv, as waiter "direct", for Content name of ns for
// deployment bd, and returns the status code and Retry-After of the
// answer.
func getStatus(t *testing.T, c *http.Client, srv *httptest.Server, ns, name, bd string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+contentapi.Path(ns, name)+"?"+contentapi.DeploymentParam+"="+bd, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(waiterHeader, "direct")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// waitAnswer waits until the content API answered waiter with code.
func waitAnswer(t *testing.T, done <-chan served, waiter string, code int) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case s := <-done:
			if s.waiter == waiter && s.code == code {
				return
			}
		case <-deadline:
			t.Fatalf("no answer %d to waiter %q", code, waiter)
		}
	}
}

// drain empties ch for the rest of the test, so that retries do not
// fill it.
func drain[T any](t *testing.T, ch <-chan T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case <-ch:
			case <-stop:
				return
			}
		}
	}()
}
