package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/scheme"
)

// deploymentLists counts the LISTs of BundleDeployments the API server
// receives from one client, per namespace.
type deploymentLists struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *deploymentLists) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		p, ok := strings.CutPrefix(r.URL.Path, "/apis/"+fleet.GroupVersion.Group+"/"+fleet.GroupVersion.Version+"/namespaces/")
		if ns, res, _ := strings.Cut(p, "/"); ok && r.Method == http.MethodGet && res == "bundledeployments" {
			c.mu.Lock()
			c.n[ns]++
			c.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (c *deploymentLists) in(ns string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[ns]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// cachedLabel marks the deployments the test's manager cache shows; the
// others stand for deployments the manager's watch has not delivered yet.
const cachedLabel = "fleet-test/cached"

// laggingCache is a real informer cache of the API server that shows only
// the deployments labelled cachedLabel.
func laggingCache(t *testing.T) client.Reader {
	t.Helper()
	c, err := cache.New(up.Config, cache.Options{Scheme: scheme.Scheme, ByObject: map[client.Object]cache.ByObject{
		&fleet.BundleDeployment{}: {Label: labels.SelectorFromSet(labels.Set{cachedLabel: "true"})},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Start(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	return c
}

// TestHintlessLiveListBoundedPerNamespace: an agent that asks, without
// naming a deployment, for many distinct Contents none of its deployments
// names costs the API server one LIST of its namespace per miss period,
// not one per name; the answers of that LIST still serve a Content a
// deployment the cache has not seen names, and never another namespace; a
// deployment written after the LIST is served at once when the agent names
// it, and without a name once the period has passed.
func TestHintlessLiveListBoundedPerNamespace(t *testing.T) {
	ctx := context.Background()
	c := up.Client
	nsA, nsB := "hintless-a", "hintless-b"
	for _, ns := range []string{nsA, nsB} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(objs ...client.Object) {
		t.Helper()
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	content := func(name string) *fleet.Content {
		return &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: name}, Content: []byte(name), SHA256Sum: "sum-" + name}
	}
	bd := func(ns, name, contentName string, cached bool) *fleet.BundleDeployment {
		o := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: fleet.BundleDeploymentSpec{DeploymentID: contentName + ":options"}}
		if cached {
			o.Labels = map[string]string{cachedLabel: "true"}
		}
		return o
	}
	// "fresh" is not in the cache yet: only a live read shows it.
	create(content("s-hintless-cached"), content("s-hintless-fresh"), bd(nsA, "cached", "s-hintless-cached", true), bd(nsA, "fresh", "s-hintless-fresh", false))

	lists := &deploymentLists{n: map[string]int{}}
	liveCfg := rest.CopyConfig(up.Config)
	liveCfg.Wrap(lists.wrap)
	live, err := client.New(liveCfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	h := &handler{cache: laggingCache(t), live: live, now: func() time.Time { return *clock.Load() }}

	// A burst of random names, all at once, with the fresh deployment's
	// Content among them.
	const names = 200
	var wg sync.WaitGroup
	errs := make(chan error, names)
	for range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 32)
			_, _ = rand.Read(b)
			_, err := h.get(ctx, nsA, "s-"+hex.EncodeToString(b), "")
			errs <- err
		}()
	}
	got, err := h.get(ctx, nsA, "s-hintless-fresh", "")
	if err != nil || string(got.Content) != "s-hintless-fresh" {
		t.Errorf("get(s-hintless-fresh) without a hint = %v, %v; want the Content of the deployment the cache has not seen", got, err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !apierrors.IsNotFound(err) {
			t.Fatalf("get(random name): %v, want NotFound", err)
		}
	}
	if n := lists.in(nsA); n != 1 {
		t.Errorf("%d distinct Contents asked for without a hint cost %d LISTs of the namespace, want 1", names+1, n)
	}
	// The cache answers what it shows without any live read.
	if _, err := h.get(ctx, nsA, "s-hintless-cached", ""); err != nil {
		t.Errorf("get(s-hintless-cached): %v", err)
	}

	// Another namespace is answered from its own LIST, never from nsA's.
	if _, err := h.get(ctx, nsB, "s-hintless-fresh", ""); !apierrors.IsNotFound(err) {
		t.Errorf("get(s-hintless-fresh) from %s: %v, want NotFound (only %s deploys it)", nsB, err, nsA)
	}
	if n := lists.in(nsB); n != 1 {
		t.Errorf("%d LISTs of %s, want 1", n, nsB)
	}

	// A deployment written after the LIST, not in the cache either.
	create(content("s-hintless-new"), bd(nsA, "new", "s-hintless-new", false))
	if got, err := h.get(ctx, nsA, "s-hintless-new", "new"); err != nil || string(got.Content) != "s-hintless-new" {
		t.Errorf("get(s-hintless-new) for deployment new = %v, %v; want the Content", got, err)
	}
	_, _ = h.get(ctx, nsA, "s-hintless-new", "")
	if n := lists.in(nsA); n != 1 {
		t.Errorf("%d LISTs of the namespace within one miss period, want 1", n)
	}
	later := now.Add(missTTL)
	clock.Store(&later)
	if got, err := h.get(ctx, nsA, "s-hintless-new", ""); err != nil || string(got.Content) != "s-hintless-new" {
		t.Errorf("get(s-hintless-new) without a hint after the miss period = %v, %v; want the Content", got, err)
	}
	if n := lists.in(nsA); n != 2 {
		t.Errorf("%d LISTs of the namespace over two miss periods, want 2", n)
	}
}
