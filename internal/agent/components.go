package agent

import (
	"context"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/metrics"
)

// Env is what an agent component gets once the agent is registered: an
// upstream manager whose cache sees only the cluster's own namespace, and the
// downstream cluster it deploys to.
type Env struct {
	// Upstream is a controller-runtime manager against the manager cluster,
	// authenticated with this cluster's own credential; its cache is limited
	// to ClusterNamespace (the credential can read nothing else).
	Upstream ctrl.Manager
	// Downstream is an admin config for the cluster the agent runs in (or
	// was pointed at with --kubeconfig).
	Downstream *rest.Config
	// ClusterNamespace is the upstream namespace of this cluster's
	// BundleDeployments.
	ClusterNamespace string
	// ClusterName and Workspace name the Cluster object upstream.
	ClusterName string
	Workspace   string
	// AgentNamespace is the downstream namespace the agent runs in.
	AgentNamespace string
	// CheckinInterval is how often the heartbeat reports.
	CheckinInterval time.Duration
	// Workers is the number of concurrent BundleDeployment reconciles.
	Workers int
	// GCInterval is how often releases whose BundleDeployment is gone are
	// removed: the garbageCollectionInterval of the agent config, read
	// when the run started (zero: the default, 15m).
	GCInterval time.Duration
}

// Component adds one part of the agent (deployer, drift, heartbeat...) to the
// upstream manager.
type Component struct {
	Name  string
	Setup func(ctx context.Context, env Env) error
}

// components lists the agent's parts in set-up order. Each concern adds one
// entry and keeps its code in its own package.
var components = []Component{
	{Name: "bundledeployment", Setup: func(ctx context.Context, env Env) error {
		return bundledeployment.Setup(ctx, bundledeployment.Options{
			Upstream: env.Upstream, Downstream: env.Downstream,
			ClusterNamespace: env.ClusterNamespace, AgentNamespace: env.AgentNamespace,
			Workers: env.Workers, GCInterval: env.GCInterval,
		})
	}},
	{Name: "metrics", Setup: func(_ context.Context, env Env) error {
		// fleet_agent_bundledeployments from the agent's own cache.
		return env.Upstream.Add(manager.RunnableFunc(func(ctx context.Context) error {
			return metrics.Run(ctx, metrics.Source{Reader: env.Upstream.GetCache(), Agent: true, Namespace: env.ClusterNamespace})
		}))
	}},
}
