// Package registration is the manager side of cluster registration: it turns
// ClusterRegistrationTokens into import credentials, grants
// ClusterRegistrations a per-cluster credential, creates each Cluster's
// namespace, imports clusters from a kubeconfig Secret (manager-initiated
// registration) and bootstraps the local cluster.
//
// Every credential handed out is a TokenRequest token of a ServiceAccount
// the manager owns; revoking a credential means deleting its ServiceAccount.
// The envtest control planes used in tests have no garbage collector, so
// every owned object is also deleted explicitly (finalizers), which is what
// makes revocation immediate in production as well.
package registration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Options configure the registration controllers.
type Options struct {
	// SystemNamespace is where the controller runs; written into values so
	// that agents know it.
	SystemNamespace string
	// SystemRegistrationNamespace holds the c-* registration secrets.
	SystemRegistrationNamespace string
	// APIServerURL and APIServerCA are what agents use to reach the manager.
	APIServerURL string
	APIServerCA  []byte
	// APIServerURLDefaulted says APIServerURL was not configured but is
	// the manager's own view of its API server (in a cluster, an
	// in-cluster address). Token values Secrets say so
	// (APIServerURLDefaultedAnnotation), so that `fleet install
	// agent-token` uses the admin's kubeconfig instead.
	APIServerURLDefaulted bool
	// BootstrapNamespace, when set, gets Cluster "local" and ClusterGroup
	// "default" at start-up.
	BootstrapNamespace string
	// BootstrapClusterLabels are labels Cluster "local" gets besides
	// name=local (chart value bootstrap.clusterLabels); see Bootstrap.
	BootstrapClusterLabels map[string]string
	// BootstrapRepo, when its Repo is set, is GitRepo "bootstrap" of the
	// bootstrap namespace (chart values bootstrap.repo, secret, branch,
	// paths); see Bootstrap.
	BootstrapRepo BootstrapRepo
	// BootstrapAgentNamespace, when set, is spec.agentNamespace of Cluster
	// "local" (chart value bootstrap.agentNamespace); see Bootstrap.
	BootstrapAgentNamespace string
	// LocalAgentDisabled keeps the agent off Cluster "local" of
	// BootstrapNamespace (chart value bootstrap.localAgentDisabled): none
	// is installed, and the one installed before is removed once the
	// Cluster's kubeconfig is known to reach the manager's own cluster.
	// The Cluster stays. See disableLocalAgent.
	LocalAgentDisabled bool
	// AgentCheckinInterval is passed to imported agents.
	AgentCheckinInterval time.Duration
	// GarbageCollectionInterval is how often agents installed on imported
	// clusters remove releases whose BundleDeployment is gone (chart value
	// garbageCollectionInterval). Zero means not set: their fleet-agent
	// ConfigMap then names no interval and they use their own default
	// (15m), as does 15m itself, so that the default never changes the
	// agent objects (and their agentConfigHash) of agents imported before.
	GarbageCollectionInterval time.Duration
	// AgentTokenTTL is the lifetime of an agent credential (TokenRequest
	// expirationSeconds); agents renew it well before it ends. Default 30
	// days, so that an agent offline for days still gets back in. The API
	// server may cap it (--service-account-max-token-expiration).
	AgentTokenTTL time.Duration
	// ImportTokenTTL is the TTL of the ClusterRegistrationToken created for
	// a manager-initiated import (default 12h, as Fleet).
	ImportTokenTTL time.Duration
	// InfiniteTokenLifetime is the lifetime of the import token of a
	// ClusterRegistrationToken without TTL (default 1 year); the values
	// Secret is refreshed when half of it is gone.
	InfiniteTokenLifetime time.Duration
	// RegistrationSecretTTL is how long a c-* secret may live when the agent
	// never confirms (default 40 minutes, as Fleet), and how long after the
	// grant the content API hands the credential out.
	RegistrationSecretTTL time.Duration
	// DeliveryCheck is how long after a grant the manager looks whether
	// the agent took its credential when it has not seen the agent check
	// in by then (default 2m, jittered); then it removes the hand-over
	// Secret's read grant. Normally the agent's first check-in triggers
	// this clean-up.
	DeliveryCheck time.Duration
	// AgentImage is the image of the fleet-agent Deployment applied on import.
	AgentImage string
	// Agent are the settings of the fleet-agent Deployment applied on
	// import that Rancher's fleet chart sets through agentImage and agent.*;
	// the zero value, like the chart's defaults, leaves the agent as it is.
	Agent AgentSettings
	// Workers is the number of concurrent reconciles per controller.
	Workers int
	// ContentRBAC gives each agent a ClusterRoleBinding to read its
	// Contents directly (fleet-content-<cluster namespace>), for a manager
	// that does not serve the content API. Off, an agent reads them
	// through the content API with its namespaced Role alone.
	ContentRBAC bool
	// Credentials, when set, hands credentials over through the content
	// API to agents that ask for it (contentapi.HandoverAnnotation); the
	// same value, set up with the manager (Credentials.Setup), must serve
	// the content API (serve.Options.Credentials). Nil: every credential
	// is handed over in a Secret.
	Credentials *Credentials
	// RegistrationTokenTTLRequired deletes every ClusterRegistrationToken
	// without a TTL (or with one of 0 or less), and refuses registrations
	// made with one (chart value controller.registrationTokenTTL.required).
	RegistrationTokenTTLRequired bool
	// IgnoreClusterRegistrationLabels drops every label an agent sends in
	// its ClusterRegistration: a Cluster created at registration gets only
	// the labels the manager sets itself (chart value
	// ignoreClusterRegistrationLabels).
	IgnoreClusterRegistrationLabels bool
}

// Defaults fills unset options.
func (o *Options) Defaults() {
	if o.SystemNamespace == "" {
		o.SystemNamespace = fleet.DefaultSystemNamespace
	}
	if o.SystemRegistrationNamespace == "" {
		o.SystemRegistrationNamespace = fleet.DefaultSystemRegistrationNamespace
	}
	if o.AgentCheckinInterval == 0 {
		o.AgentCheckinInterval = 15 * time.Minute
	}
	if o.AgentTokenTTL == 0 {
		o.AgentTokenTTL = 30 * 24 * time.Hour
	}
	if o.ImportTokenTTL == 0 {
		o.ImportTokenTTL = 12 * time.Hour
	}
	if o.InfiniteTokenLifetime == 0 {
		o.InfiniteTokenLifetime = 365 * 24 * time.Hour
	}
	if o.RegistrationSecretTTL == 0 {
		o.RegistrationSecretTTL = 40 * time.Minute
	}
	if o.DeliveryCheck == 0 {
		o.DeliveryCheck = 2 * time.Minute
	}
	if o.AgentImage == "" {
		o.AgentImage = DefaultAgentImage
	}
	if o.Workers == 0 {
		o.Workers = 10
	}
}

// DefaultAgentImage is the fleet-agent image used when none is configured.
const DefaultAgentImage = "ghcr.io/fleetgo/fleet-agent:latest"

// Field indexes (names prefixed so they never clash with other areas').
const (
	clusterClientIDIndex      = "registration.cluster.spec.clientID"
	registrationClientIDIndex = "registration.clusterregistration.spec.clientID"
)

// fieldOwner marks writes of this area.
const fieldOwner = client.FieldOwner("fleet-registration")

// Setup adds the registration controllers and the local bootstrap to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opts.Defaults()
	if err := opts.Agent.Validate(); err != nil {
		return err
	}
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &fleet.Cluster{}, clusterClientIDIndex, func(o client.Object) []string {
		if id := o.(*fleet.Cluster).Spec.ClientID; id != "" {
			return []string{id}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing clusters: %w", err)
	}
	if err := idx.IndexField(ctx, &fleet.ClusterRegistration{}, registrationClientIDIndex, func(o client.Object) []string {
		if id := o.(*fleet.ClusterRegistration).Spec.ClientID; id != "" {
			return []string{id}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing cluster registrations: %w", err)
	}
	base := reconcilerBase{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Opts: opts, Config: mgr.GetConfig(),
		Recorder: mgr.GetEventRecorder("fleet-registration")}
	if err := (&TokenReconciler{reconcilerBase: base}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&RegistrationReconciler{reconcilerBase: base}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&ClusterReconciler{reconcilerBase: base}).SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Add(&Bootstrap{reconcilerBase: base})
}

// reconcilerBase is what every registration reconciler shares.
type reconcilerBase struct {
	// Client reads from the cache and writes to the API server.
	Client client.Client
	// Reader reads straight from the API server; used for Secrets,
	// ServiceAccounts and RBAC so that the manager does not cache every one
	// of them cluster-wide.
	Reader client.Reader
	Opts   Options
	// Config is the manager's own rest config (for the local bootstrap).
	Config *rest.Config
	// Recorder writes Events about the objects reconciled (never a
	// credential in them).
	Recorder events.EventRecorder
}

// rateLimiter is a jittered exponential backoff per object (1s .. 5m), so
// that failing objects never retry in lock-step or in a tight loop.
func rateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return &jitterLimiter{inner: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute)}
}

type jitterLimiter struct {
	inner workqueue.TypedRateLimiter[reconcile.Request]
}

func (j *jitterLimiter) When(item reconcile.Request) time.Duration {
	return jitter(j.inner.When(item))
}
func (j *jitterLimiter) Forget(item reconcile.Request)          { j.inner.Forget(item) }
func (j *jitterLimiter) NumRequeues(item reconcile.Request) int { return j.inner.NumRequeues(item) }

// jitter spreads d by up to +20%.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}
