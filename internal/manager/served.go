package manager

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/policy"
)

// servedKinds asks the API server, once, which kinds of fleet.cattle.io it
// serves. A manager upgraded before its fleet-crd chart then runs without
// the kinds the old CRDs lack (HelmOp, Policy) instead of failing to start
// on a watch or cache of an unknown kind.
func servedKinds(cfg *rest.Config) (*metav1.APIResourceList, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := dc.ServerResourcesForGroupVersion(fleet.GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		return &metav1.APIResourceList{}, nil
	case err != nil:
		return nil, fmt.Errorf("discovering %s: %w", fleet.GroupVersion, err)
	}
	return list, nil
}

// servesKind reports whether a discovery list has kind.
func servesKind(list *metav1.APIResourceList, kind string) bool {
	for _, r := range list.APIResources {
		if r.Kind == kind {
			return true
		}
	}
	return false
}

// servedRecheck is how often a manager started without some of its CRDs
// asks discovery again: one small request, only until they appear.
// servedJitter spreads the requests of replicas started together (up to
// 20% later).
const (
	servedRecheck = 10 * time.Second
	servedJitter  = 0.2
)

// servedKindsPoller watches for the kinds a manager started without, so
// that upgrading the fleet-crd chart after the manager needs no restart.
// The Policy CRD opens the Policy gate (enforced from then on: a fail-open
// window must not last until someone restarts the manager); the CRD of an
// awaited component (HelmOp, Schedule) runs its Setup. Its controller,
// added to the running manager, waits for leadership like the others
// (controller-runtime starts leader-election runnables added after Start
// only while this replica leads), and its informers are created on demand,
// with the shard's selector already in the cache's options (shardCache).
type servedKindsPoller struct {
	cfg      *rest.Config
	policies *policy.Gate
	// awaited are the components whose CRD was not served at start.
	awaited []Component
	// setup sets up a component in the running manager.
	setup func(context.Context, Component) error
}

// NeedLeaderElection is false: every replica enforces Policies as soon as
// it may act, and has its awaited controllers ready for when it leads.
func (p *servedKindsPoller) NeedLeaderElection() bool { return false }

func (p *servedKindsPoller) Start(ctx context.Context) error {
	if p.done() {
		return nil
	}
	// Setup gets the manager's context: what it starts lives as long as
	// the manager, not as long as this polling.
	life := ctx
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	log := ctrl.Log.WithName("served-kinds")
	wait.JitterUntilWithContext(ctx, func(context.Context) {
		if p.check(life, log) {
			stop()
		}
	}, servedRecheck, servedJitter, true)
	return nil
}

// done reports whether nothing is awaited any more.
func (p *servedKindsPoller) done() bool {
	return p.policies.Served() && len(p.awaited) == 0
}

// check asks discovery once and acts on the kinds now served; it reports
// whether nothing is awaited any more. ctx is the manager's lifetime: the
// components set up here keep it. A kind still missing is not logged: New
// said so once.
func (p *servedKindsPoller) check(ctx context.Context, log logr.Logger) bool {
	list, err := servedKinds(p.cfg)
	if err != nil {
		log.Error(err, "checking which fleet kinds the API server serves")
		return false
	}
	if !p.policies.Served() && servesKind(list, "Policy") {
		if err := p.policies.Open(); err != nil {
			// Reads enforce Policies all the same; a watch that did
			// not start only delays re-evaluation to each object's
			// next change.
			log.Error(err, "starting the Policy watches")
		}
		log.Info("the Policy CRD is now served: Policies are enforced")
	}
	p.awaited = slices.DeleteFunc(p.awaited, func(c Component) bool {
		if !servesKind(list, c.CRD) {
			return false
		}
		// Set up once only, also when it fails: a controller may already
		// have been added, and a second one would reconcile twice.
		if err := p.setup(ctx, c); err != nil {
			log.Error(err, "the "+c.CRD+" CRD is now served, but its controller did not start: restart the manager", "component", c.Name)
			return true
		}
		log.Info("the "+c.CRD+" CRD is now served: its controller starts", "component", c.Name)
		return true
	})
	return p.done()
}
