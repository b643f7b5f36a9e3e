package simulator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/manifest"
)

// testAgent is a status-only agent whose API server is an HTTP server that
// counts the requests it gets and fails them all (with a 500).
func testAgent(t *testing.T, ctx context.Context) (*agent, *atomic.Int32) {
	return testAgentAnswering(t, ctx, http.StatusInternalServerError)
}

// testAgentAnswering is testAgent with a server failing with code.
func testAgentAnswering(t *testing.T, ctx context.Context, code int) (*agent, *atomic.Int32) {
	t.Helper()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.Error(w, "unavailable in this test", code)
	}))
	t.Cleanup(srv.Close)
	s := &Simulator{opts: Options{Count: 1, Bootstrap: &register.Bootstrap{APIServerURL: srv.URL}}}
	if err := s.opts.defaults(); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.fleetClient, err = sharedClient(s.opts.Bootstrap, http.DefaultTransport, "/apis", &fleet.GroupVersion); err != nil {
		t.Fatal(err)
	}
	s.contents = &contentapi.Reader{REST: s.fleetClient}
	a := newAgent(s, 0)
	a.done = ctx.Done()
	return a, &requests
}

func bundleDeployment(name, id string) fleet.BundleDeployment {
	return fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "cluster-ns"},
		Spec: fleet.BundleDeploymentSpec{DeploymentID: id}}
}

// TestRelistWaitsForTheWorker: a BundleDeployment that a worker is
// applying when the agent relists is not applied a second time at once by
// the relist: its listed version waits for that worker, as a watch event's
// does, so one release never sees two Helm actions at a time.
func TestRelistWaitsForTheWorker(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, requests := testAgent(t, ctx)
	a.applied["bd"] = "s-old:1"
	a.inflight["bd"] = true // a worker is applying s-old:1

	a.relisted(ctx, []fleet.BundleDeployment{bundleDeployment("bd", "s-new:1")})

	if n := requests.Load(); n != 0 {
		t.Errorf("the relist applied the deployment a worker has (%d requests to the API server)", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.pending["bd"]; p == nil || p.Spec.DeploymentID != "s-new:1" {
		t.Errorf("pending = %v, want the listed s-new:1 waiting for the worker", p)
	}
}

// TestRelistForgetsDeletedDeployments: BundleDeployments deleted while no
// watch was open (so no Deleted event came) are forgotten once a relist
// no longer shows them; those listed are kept.
func TestRelistForgetsDeletedDeployments(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, requests := testAgent(t, ctx)
	gone := bundleDeployment("gone", "s-1:1")
	a.applied["gone"], a.applied["kept"] = "s-1:1", "s-2:1"
	a.failures["gone"] = 3
	a.pending["gone"] = &gone

	a.relisted(ctx, []fleet.BundleDeployment{bundleDeployment("kept", "s-2:1")})

	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.applied) != 1 || a.applied["kept"] != "s-2:1" {
		t.Errorf("applied = %v, want only kept", a.applied)
	}
	if len(a.failures) != 0 {
		t.Errorf("failures = %v, want none", a.failures)
	}
	if _, ok := a.pending["gone"]; ok {
		t.Error("the deleted deployment is still pending")
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests for a deployment already reported", n)
	}
}

// TestRetryOfDeletedDeploymentForgetsIt: a failed BundleDeployment whose
// retry finds it deleted is forgotten (its Deleted event may have come
// before the failure was counted).
func TestRetryOfDeletedDeploymentForgetsIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, requests := testAgentAnswering(t, ctx, http.StatusNotFound)
	a.cred = &register.Credential{DeploymentNamespace: "cluster-ns"}
	a.failures["gone"] = 2
	a.retries = make(chan string) // unbuffered: a send returns once consume has it
	w := watch.NewFake()
	done := make(chan struct{})
	go func() { defer close(done); a.consume(ctx, w, "1") }()
	a.retries <- "gone"
	w.Stop() // consume returns after handling the retry
	<-done
	if requests.Load() == 0 {
		t.Fatal("the retry did not read the deployment")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.failures) != 0 {
		t.Errorf("failures = %v, want the deleted deployment forgotten", a.failures)
	}
}

// TestObjectCacheIsBounded: the manifests' objects kept for status-only
// reports stay bounded over many rollouts, while a manifest in use keeps
// being answered from the cache, not parsed again.
func TestObjectCacheIsBounded(t *testing.T) {
	s := &Simulator{}
	manifestOf := func(name string) *manifest.Manifest {
		return &manifest.Manifest{Resources: []fleet.BundleResource{{Name: "cm.yaml",
			Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"}}}
	}
	s.resourcesOf("s-hot", manifestOf("hot"), "ns")
	for i := range 10 * maxCachedManifests {
		s.resourcesOf(fmt.Sprintf("s-%d", i), manifestOf("cold"), "ns")
		if i%100 == 0 {
			// Were it parsed again, its objects would be "changed".
			if got := s.resourcesOf("s-hot", manifestOf("changed"), "ns"); got[0].Name != "hot" {
				t.Fatalf("the manifest in use was parsed again after %d others", i)
			}
		}
	}
	s.objects.mu.Lock()
	n := len(s.objects.cur) + len(s.objects.prev)
	s.objects.mu.Unlock()
	if n > 2*maxCachedManifests {
		t.Fatalf("%d manifests cached after %d rollouts, want at most %d", n, 10*maxCachedManifests, 2*maxCachedManifests)
	}
}
