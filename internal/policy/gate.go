package policy

import (
	"sync"
	"sync/atomic"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Gate tells the GitRepo, HelmOp and Bundle controllers whether the API
// server serves Policies. A manager upgraded before its fleet-crd chart
// starts without the Policy CRD; were it to wait for a restart once the CRD
// is installed, every Policy created in between would be ignored (fail
// open). Instead the manager polls discovery and opens the
// gate when the kind appears: from then on the controllers read Policies,
// and each starts its watch of them, whose initial list re-evaluates every
// object in a namespace that has one.
//
// A nil *Gate is open: controllers built without a manager (tests) enforce
// Policies as usual.
type Gate struct {
	served atomic.Bool

	mu       sync.Mutex
	onServed []func() error
}

// NewGate returns a gate, open when served.
func NewGate(served bool) *Gate {
	g := &Gate{}
	g.served.Store(served)
	return g
}

// Served reports whether Policies are served, hence enforced.
func (g *Gate) Served() bool {
	return g == nil || g.served.Load()
}

// OnServed runs f once Policies are served: now if they already are (its
// error is returned), else when the gate opens. Controllers pass the start
// of their Policy watch.
func (g *Gate) OnServed(f func() error) error {
	if g == nil {
		return f()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.served.Load() {
		return f()
	}
	g.onServed = append(g.onServed, f)
	return nil
}

// Open marks Policies served, then runs the waiting functions (all of
// them; the first error is returned). Readers see the gate open before the
// watches start: a reconcile that read Policies before the gate opened is
// followed by the watch's initial list of every Policy, which enqueues its
// object again. The other order could lose a check: an object enqueued by
// that list and reconciled before the gate opened would be checked without
// Policies, its event used up.
func (g *Gate) Open() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.served.Load() {
		return nil
	}
	g.served.Store(true)
	var first error
	for _, f := range g.onServed {
		if err := f(); err != nil && first == nil {
			first = err
		}
	}
	g.onServed = nil
	return first
}

// Watch makes controller c watch Policies with h once g is open (at once
// if it is). The watch added after the manager started begins with a list
// of every Policy, so h re-evaluates each namespace that has one.
func Watch(mgr manager.Manager, g *Gate, c controller.Controller, h handler.EventHandler) error {
	return g.OnServed(func() error {
		return c.Watch(source.Kind[client.Object](mgr.GetCache(), &fleet.Policy{}, h))
	})
}
