package deployer

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// serverSide is a transport in front of the downstream API server that
// counts the requests reaching it and lets a test act on each first.
type serverSide struct {
	count  atomic.Int64
	before atomic.Pointer[func(*http.Request)]
}

// observed is one client's transport through a serverSide.
type observed struct {
	s  *serverSide
	rt http.RoundTripper
}

func (o observed) RoundTrip(req *http.Request) (*http.Response, error) {
	o.s.count.Add(1)
	if f := o.s.before.Load(); f != nil {
		(*f)(req)
	}
	return o.rt.RoundTrip(req)
}

// observedDeployer is a Deployer whose every request to the downstream API
// server goes through the returned serverSide.
func observedDeployer(t *testing.T) (*Deployer, *serverSide) {
	t.Helper()
	s := &serverSide{}
	cfg := rest.CopyConfig(downstream(t).Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return observed{s: s, rt: rt} })
	d, err := New(cfg, testAgentNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return d, s
}

// Current with a context that already ended (the reconcile that asks gave
// up: the agent lost its lease) answers with the context's error and asks
// the downstream API server nothing.
func TestCurrentWithEndedContext(t *testing.T) {
	d, server := observedDeployer(t)
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: "ctx-current"}
	if _, err := deployFiles(t, d, "app", cmFile("app", "v1"), opts); err != nil {
		t.Fatal(err)
	}
	// The signing key is read once per Deployer: read it now, so that
	// only Current's own reads are left.
	if cur, err := d.Current(context.Background(), "app", opts); err != nil || cur == nil {
		t.Fatalf("current release %+v (%v)", cur, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := server.count.Load()
	cur, err := d.Current(ctx, "app", opts)
	if !errors.Is(err, context.Canceled) || cur != nil {
		t.Fatalf("Current with an ended context: %+v, %v; want no release and context.Canceled", cur, err)
	}
	if n := server.count.Load() - before; n != 0 {
		t.Fatalf("Current with an ended context sent %d requests to the API server, want none", n)
	}
}

// The downstream API server stalls on the apply of a drift correction's
// rollback, and the reconcile that asked for it gives up meanwhile (the
// agent lost its lease). The stalled request is cancelled, the rollback
// goes no further (nothing is restored nor recorded behind the back of the
// process that took over) and CorrectDrift says it was cancelled.
func TestCorrectDriftStopsWithContext(t *testing.T) {
	d, server := observedDeployer(t)
	const ns = "ctx-drift"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	if _, err := deployFiles(t, d, "app", cmFile("app", "v1"), opts); err != nil {
		t.Fatal(err)
	}
	if err := d.core.ConfigMaps(ns).Delete(context.Background(), "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stalled, after atomic.Int64
	var ended atomic.Bool
	hook := func(req *http.Request) {
		if ended.Load() {
			after.Add(1)
			return
		}
		if req.Method == http.MethodGet || !strings.Contains(req.URL.Path, "/configmaps") {
			return
		}
		// The apply that restores the ConfigMap: the server stalls
		// until the request is given up, and the reconcile gives up.
		stalled.Add(1)
		ended.Store(true)
		cancel()
		select {
		case <-req.Context().Done():
		case <-time.After(time.Minute): // only so that a failing test ends
		}
	}
	server.before.Store(&hook)
	err := d.CorrectDrift(ctx, "app", opts, fleet.CorrectDrift{Enabled: true})
	server.before.Store(nil)

	if stalled.Load() != 1 {
		t.Fatalf("the rollback applied %d times, want 1 (stalled)", stalled.Load())
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("CorrectDrift cancelled during its apply: %v, want context.Canceled", err)
	}
	if n := after.Load(); n != 0 {
		t.Fatalf("the rollback sent %d requests after its context was cancelled, want none", n)
	}
	if _, err := d.core.ConfigMaps(ns).Get(context.Background(), "app", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the ConfigMap was restored by a cancelled rollback (get: %v)", err)
	}
}

// A drift correction that fails on its own (here: no release to restore)
// says so, and not that its context ended: the caller tells giving up
// from failing by it.
func TestCorrectDriftFailureIsNotCancellation(t *testing.T) {
	d, _ := observedDeployer(t)
	err := d.CorrectDrift(context.Background(), "never-deployed", fleet.BundleDeploymentOptions{DefaultNamespace: "ctx-none"}, fleet.CorrectDrift{Enabled: true})
	if err == nil {
		t.Fatal("CorrectDrift of a release that does not exist succeeded")
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a failed drift correction is reported as its context ending: %v", err)
	}
}

// A drift correction waits for each hook as long as the bundle's
// helm.timeoutSeconds says (else as long as a deploy does) and is bounded
// as a whole, so a stalled API server cannot hold its BundleDeployment
// for good.
func TestRollbackTimeouts(t *testing.T) {
	for _, c := range []struct {
		h              *fleet.HelmOptions
		wait, deadline time.Duration
	}{
		{nil, defaultHookTimeout, 2*defaultHookTimeout + rollbackSlack},
		{&fleet.HelmOptions{}, defaultHookTimeout, 2*defaultHookTimeout + rollbackSlack},
		{&fleet.HelmOptions{TimeoutSeconds: 30}, 30 * time.Second, time.Minute + rollbackSlack},
	} {
		wait, deadline := rollbackTimeouts(c.h)
		if wait != c.wait || deadline != c.deadline {
			t.Errorf("rollbackTimeouts(%+v) = %v, %v; want %v, %v", c.h, wait, deadline, c.wait, c.deadline)
		}
	}
}
