package serve

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/scheme"
)

// liveReader stands in for the API server: etcd answers reads without a
// resourceVersion, watchCache (etcd when nil) those with resourceVersion 0.
// It counts both kinds of BundleDeployment reads and the lists; it is safe
// for concurrent use.
type liveReader struct {
	etcd, watchCache         client.Reader
	cachedGets, quorumGets   atomic.Int32
	lists                    atomic.Int32
	block                    chan struct{} // when set, reads wait for it to close
	blockedOnce, releaseOnce sync.Once
}

func (r *liveReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	src := r.etcd
	if _, ok := obj.(*fleet.BundleDeployment); ok {
		o := &client.GetOptions{}
		o.ApplyOptions(opts)
		if o.Raw != nil && o.Raw.ResourceVersion == "0" {
			r.cachedGets.Add(1)
			if r.watchCache != nil {
				src = r.watchCache
			}
		} else {
			r.quorumGets.Add(1)
		}
		if r.block != nil {
			<-r.block
		}
	}
	return src.Get(ctx, key, obj)
}

func (r *liveReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists.Add(1)
	if r.block != nil {
		<-r.block
	}
	return r.etcd.List(ctx, list, opts...)
}

func (r *liveReader) reads() int32 { return r.cachedGets.Load() + r.quorumGets.Load() + r.lists.Load() }

func newClient(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).Build()
}

func deployment(name, contentID string) *fleet.BundleDeployment {
	return &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-a", Name: name},
		Spec: fleet.BundleDeploymentSpec{DeploymentID: contentID + ":options"}}
}

// TestLiveFallbackBounded: an agent that asks again and again, and all at
// once, for a Content no deployment of its namespace names, with a
// deployment hint that names nothing (or none), costs the API server a
// handful of reads, not one or two per request; and a miss is remembered
// only briefly.
func TestLiveFallbackBounded(t *testing.T) {
	for _, hint := range []string{"no-such-deployment", ""} {
		t.Run("hint "+hint, func(t *testing.T) {
			content := &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: "s-x"}, Content: []byte("x")}
			live := &liveReader{etcd: newClient(content, deployment("app", "s-app")), block: make(chan struct{})}
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			var clock atomic.Pointer[time.Time]
			clock.Store(&now)
			h := &handler{cache: newClient(deployment("app", "s-app")), live: live}
			h.now = func() time.Time { return *clock.Load() }

			const requests = 100
			var wg sync.WaitGroup
			errs := make(chan error, requests)
			for range requests {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := h.get(context.Background(), "cluster-a", "s-x", hint)
					errs <- err
				}()
			}
			// Let the reads through once the first one has started; the
			// others either share it or come after it.
			for live.reads() == 0 {
				time.Sleep(time.Millisecond)
			}
			close(live.block)
			wg.Wait()
			close(errs)
			for err := range errs {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("get: %v, want NotFound", err)
				}
			}
			if n := live.reads(); n > 4 {
				t.Errorf("%d requests for the same missing Content cost %d live reads, want a handful", requests, n)
			}
			if n := live.quorumGets.Load(); n > 1 {
				t.Errorf("%d etcd reads for one missing deployment, want at most one", n)
			}

			// Once the miss is old, a request looks again.
			before := live.reads()
			later := now.Add(missTTL + time.Second)
			clock.Store(&later)
			if _, err := h.get(context.Background(), "cluster-a", "s-x", hint); !apierrors.IsNotFound(err) {
				t.Fatalf("get: %v, want NotFound", err)
			}
			if live.reads() == before {
				t.Error("a miss older than missTTL was answered without a live read")
			}
		})
	}
}

// TestLiveFallbackNewDeployment: a deployment the manager's cache has not
// seen yet is still served: from the API server's watch cache when it has
// it as the agent does, from etcd when the watch cache has an older copy;
// and a miss remembered for a deployment does not hide it once the cache
// or this process's own write shows it.
func TestLiveFallbackNewDeployment(t *testing.T) {
	content := func(name string) *fleet.Content {
		return &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: name}, Content: []byte(name)}
	}
	served := func(t *testing.T, h *handler, name, hint string) {
		t.Helper()
		got, err := h.get(context.Background(), "cluster-a", name, hint)
		if err != nil || string(got.Content) != name {
			t.Fatalf("get(%s, %s) = %v, %v; want the Content", name, hint, got, err)
		}
	}

	t.Run("in the watch cache", func(t *testing.T) {
		live := &liveReader{etcd: newClient(content("s-new"), deployment("app", "s-new"))}
		h := &handler{cache: newClient(), live: live}
		served(t, h, "s-new", "app")
		if c, q := live.cachedGets.Load(), live.quorumGets.Load(); c != 1 || q != 0 {
			t.Errorf("%d watch-cache and %d etcd reads, want 1 and 0", c, q)
		}
	})

	t.Run("older in the watch cache than in etcd", func(t *testing.T) {
		live := &liveReader{etcd: newClient(content("s-new"), deployment("app", "s-new")),
			watchCache: newClient(deployment("app", "s-old"))}
		h := &handler{cache: newClient(), live: live}
		served(t, h, "s-new", "app")
		if q := live.quorumGets.Load(); q != 1 {
			t.Errorf("%d etcd reads, want 1", q)
		}
	})

	// Several API servers: the agent saw the deployment through one, the
	// manager asks another whose watch cache has not got it yet.
	t.Run("not yet in the watch cache", func(t *testing.T) {
		live := &liveReader{etcd: newClient(content("s-new"), deployment("app", "s-new")), watchCache: newClient()}
		h := &handler{cache: newClient(), live: live}
		served(t, h, "s-new", "app")
		if q := live.quorumGets.Load(); q != 1 {
			t.Errorf("%d etcd reads, want 1", q)
		}
	})

	t.Run("a remembered miss does not hide the cache or a write", func(t *testing.T) {
		cache := newClient()
		published := contentapi.NewPublished()
		live := &liveReader{etcd: newClient(content("s-new"), content("s-pub"))}
		h := &handler{cache: cache, live: live, published: published}
		for _, name := range []string{"s-new", "s-pub"} {
			if _, err := h.get(context.Background(), "cluster-a", name, "app"); !apierrors.IsNotFound(err) {
				t.Fatalf("get(%s) before the deployment exists: %v, want NotFound", name, err)
			}
		}
		if err := cache.Create(context.Background(), deployment("app", "s-new")); err != nil {
			t.Fatal(err)
		}
		published.Record(types.NamespacedName{Namespace: "cluster-a", Name: "app"}, []string{"s-pub"})
		served(t, h, "s-new", "app")
		served(t, h, "s-pub", "app")
	})
}
