package bundledeployment

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/agent/drift"
)

// Peer is the reconciler of another agent on the same downstream cluster,
// with its own agent namespace, reading the cluster namespace upstream
// through up. No manager runs it: a test calls it to copy
// downstreamResources as that agent's deploy does, and to clean up after a
// gone BundleDeployment as that agent does after a restart.
type Peer struct{ r *Reconciler }

// NewPeer builds the reconciler of the agent of agentNS; its drift watcher
// stops with ctx.
func NewPeer(ctx context.Context, up client.Client, down *rest.Config, clusterNS, agentNS string) (*Peer, error) {
	dep, err := deployer.NewWithOptions(deployer.Options{Config: down, AgentNamespace: agentNS})
	if err != nil {
		return nil, err
	}
	w, err := drift.NewWatcher(ctx, drift.WatcherOptions{
		Config: down, Label: deployer.SetHashLabel, Notify: func(types.NamespacedName) {},
		Mapper: dep.Discovery().RESTMapper(),
	})
	if err != nil {
		return nil, err
	}
	return &Peer{r: &Reconciler{
		client: up, apiReader: up, deployer: dep, watcher: w, runCtx: ctx,
		opts:    Options{ClusterNamespace: clusterNS, AgentNamespace: agentNS},
		applied: map[types.NamespacedName]*appliedState{}, failures: map[types.NamespacedName]*failure{},
		refused: map[types.NamespacedName]string{}, contentWaits: map[types.NamespacedName]contentWait{},
	}}, nil
}

// Copy copies bd's downstreamResources as the peer's deploy does first.
func (p *Peer) Copy(ctx context.Context, bd *fleet.BundleDeployment) error {
	return p.r.copyDownstreamResources(ctx, bd, bd.Spec.Options, "")
}

// Cleanup runs the peer's clean-up of its BundleDeployment name, gone.
func (p *Peer) Cleanup(ctx context.Context, name string) error {
	key := types.NamespacedName{Namespace: p.r.opts.ClusterNamespace, Name: name}
	defer p.r.lock(key)()
	return p.r.cleanup(ctx, key)
}
