// Package manager runs the Fleet manager (fleet-controller): every
// controller of the manager side, in one controller-runtime manager against
// the manager cluster's API server. It never dials a downstream cluster,
// except to import one from a kubeconfig Secret (manager-initiated
// registration).
package manager

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/contentapi/serve"
	"github.com/fleetgo/fleet/internal/controller/clusterstatus"
	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/kubeclient"
	"github.com/fleetgo/fleet/internal/policy"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/scheme"
)

// Options configure the manager process. The zero value of each field means
// its documented default (see Defaults).
type Options struct {
	// SystemNamespace is where the controller runs (cattle-fleet-system).
	SystemNamespace string
	// SystemRegistrationNamespace holds the c-* registration secrets.
	SystemRegistrationNamespace string
	// APIServerURL and APIServerCA are what agents use to reach this
	// cluster; they are written into registration token values.
	APIServerURL string
	// apiServerURLDefaulted: APIServerURL was not configured (New used
	// the rest config's host).
	apiServerURLDefaulted bool
	APIServerCA           []byte
	// AgentCheckinInterval is how often agents report in (default 15m).
	AgentCheckinInterval time.Duration
	// GarbageCollectionInterval is passed to agents installed on imported
	// clusters (see registration.Options); zero leaves them at their
	// default of 15m.
	GarbageCollectionInterval time.Duration
	// ShardID limits this replica to objects labelled with it.
	ShardID string
	// MetricsAddr and ProbeAddr; "0" disables.
	MetricsAddr string
	ProbeAddr   string
	// WebhookAddr serves git webhooks; "" or "0" disables.
	WebhookAddr string
	// WebhookAllowUnsigned takes webhooks for providers without a key in
	// the shared webhook Secret unchecked, as Rancher Fleet does
	// (webhook.Handler.AllowUnsigned; chart value webhook.allowUnsigned).
	WebhookAllowUnsigned bool
	// DisableHelmOps leaves the HelmOp controller out (chart value
	// helmops.enabled=false): HelmOps are then not acted upon.
	DisableHelmOps bool
	// Schedules runs the Schedule controller (Rancher Fleet's experimental
	// EXPERIMENTAL_SCHEDULES=true; --schedules). Off, Cluster flags are
	// left as they are (held clusters stay held, as in Rancher Fleet):
	// only a Schedule being deleted clears its clusters' flags (those no
	// remaining Schedule lists) and loses its finalizer
	// (schedule.SetupDisabled).
	Schedules bool
	// policies tells the controllers whether the API server serves
	// Policies yet (set by New; see policy.Gate).
	policies *policy.Gate
	// helmOpsRunning is set once the HelmOp controller is set up (at start,
	// or when its CRD appears later): the metrics list HelmOps only then.
	helmOpsRunning *atomic.Bool
	// DisableGitOps leaves the GitRepo controller and its webhook receiver
	// out (chart value gitops.enabled=false, as Rancher without gitjob):
	// GitRepos are then left exactly as they are (their Bundles are still
	// deployed), and nothing of this manager watches GitRepos.
	DisableGitOps bool
	// LeaderElection enables a Lease so that one replica (per shard) acts.
	LeaderElection          bool
	LeaderElectionNamespace string
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration
	// BootstrapNamespace, when non-empty, gets the local Cluster and the
	// default ClusterGroup.
	BootstrapNamespace string
	// BootstrapClusterLabels are labels of the local Cluster besides
	// name=local (chart value bootstrap.clusterLabels).
	BootstrapClusterLabels map[string]string
	// BootstrapRepo, when its Repo is set, is GitRepo "bootstrap" of
	// BootstrapNamespace (chart values bootstrap.repo, secret, branch,
	// paths).
	BootstrapRepo registration.BootstrapRepo
	// BootstrapAgentNamespace, when set, is spec.agentNamespace of the
	// local Cluster (chart value bootstrap.agentNamespace).
	BootstrapAgentNamespace string
	// BootstrapLocalAgentDisabled keeps the agent off the local Cluster
	// (chart value bootstrap.localAgentDisabled).
	BootstrapLocalAgentDisabled bool
	// Workers is the number of concurrent reconciles per controller.
	Workers int
	// MaxInFlight bounds the manager's API requests in flight, watches and
	// Leases excepted (default kubeclient.DefaultMaxInFlight): more than an
	// HTTP/2 connection's streams make Go's client dial a TLS connection
	// per waiting request.
	MaxInFlight int
	// GitLimits bound what one GitRepo fetch may store on disk and what
	// its checkout may hold (zero fields: the git package's defaults).
	GitLimits git.Limits
	// InsecureSkipHostKeyChecks accepts any SSH host key when cloning
	// GitRepos and fetching the git:: chart sources of GitRepos and
	// HelmOps (chart value
	// insecureSkipHostKeyChecks). Otherwise a server
	// is checked against the client Secret's known_hosts or the
	// known-hosts ConfigMap of SystemNamespace.
	InsecureSkipHostKeyChecks bool
	// AgentTokenTTL is the lifetime of agent credentials (default 30 days).
	AgentTokenTTL time.Duration
	// AgentImage is the fleet-agent image installed by imports.
	AgentImage string
	// Agent are further settings of the agents installed by imports
	// (registration.AgentSettings); the zero value changes nothing.
	Agent registration.AgentSettings
	// RegistrationTokenTTLRequired deletes ClusterRegistrationTokens
	// without a TTL (registration.Options).
	RegistrationTokenTTLRequired bool
	// IgnoreClusterRegistrationLabels drops the labels agents send when
	// they register (registration.Options).
	IgnoreClusterRegistrationLabels bool
	// OfflineThreshold is how long after its last check-in a cluster is
	// Offline (default 3 × AgentCheckinInterval).
	OfflineThreshold time.Duration
	// ContentAPI is how agents read Contents (package contentapi). The
	// zero value suits a manager running as a local process next to its
	// API server (tests, `fleet dev`, the scale harness): listen on a
	// loopback port and register an ExternalName Service for 127.0.0.1.
	// fleet-controller sets Addr (":8443") and the in-cluster Service.
	// Addr "0" turns the API off: agents then read Contents through a
	// ClusterRoleBinding per cluster.
	ContentAPI serve.Options
}

// ContentRBAC reports whether Contents are granted through RBAC (the
// content API is off).
func (o Options) ContentRBAC() bool { return !o.ContentAPI.Enabled() }

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
	if o.OfflineThreshold == 0 {
		o.OfflineThreshold = 3 * o.AgentCheckinInterval
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 30 * time.Second
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = 25 * time.Second
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = 10 * time.Second
	}
	if o.Workers == 0 {
		o.Workers = 50
	}
	if o.LeaderElectionNamespace == "" {
		o.LeaderElectionNamespace = o.SystemNamespace
	}
	if o.ContentAPI.Addr == "" {
		o.ContentAPI.Addr = "127.0.0.1:0"
		o.ContentAPI.ExternalName = "127.0.0.1"
	}
}

// Component adds one group of controllers to the manager. Each concern
// (registration, bundles, targeting, gitops, ...) contributes one.
type Component struct {
	Name  string
	Setup func(ctx context.Context, mgr ctrl.Manager, opts Options) error
	// Unsharded components (registration, cluster status, Content GC)
	// must run once per installation: only the replica without --shard-id
	// sets them up.
	Unsharded bool
	// CRD is the kind this component's controller needs that older
	// fleet-crd charts lack (HelmOp, Schedule). While the API server does
	// not serve it, Setup waits and runs once discovery lists the kind
	// (servedKindsPoller): upgrading fleet-crd after the manager needs no
	// restart, and a watch of an unknown kind cannot fail the start.
	CRD string
	// SkipWithoutCRD: while CRD is not served at start, the component is
	// neither set up nor awaited. For one that only acts on objects of
	// that kind that already exist (the disabled Schedule release): a CRD
	// installed later brings none.
	SkipWithoutCRD bool
	// Enabled tells whether opts turn the component on (nil: always), so
	// that a manager does not wait for the CRD of a controller it would not
	// run.
	Enabled func(Options) bool
}

// leaseName is the Lease this replica (or shard) competes for.
func leaseName(opts Options) string {
	if opts.ShardID != "" {
		return "fleet-controller-leader-election-shard-" + opts.ShardID
	}
	return "fleet-controller-leader-election-shard"
}

// New builds a controller-runtime manager with every component set up.
func New(ctx context.Context, cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	opts.Defaults()
	if opts.APIServerURL == "" {
		// The address this manager reaches its API server at: right for a
		// manager outside the cluster, an in-cluster address otherwise.
		opts.APIServerURL, opts.apiServerURLDefaulted = cfg.Host, true
	}
	if len(opts.APIServerCA) == 0 {
		opts.APIServerCA = cfg.CAData
	}
	if len(opts.APIServerCA) == 0 && cfg.CAFile != "" {
		// A kubeconfig may name its CA by file; agents still need the PEM.
		ca, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the API server CA %s: %w", cfg.CAFile, err)
		}
		opts.APIServerCA = ca
	}
	cfg = rest.CopyConfig(cfg)
	kubeclient.LimitInFlight(cfg, opts.MaxInFlight)
	served, err := servedKinds(cfg)
	if err != nil {
		return nil, err
	}
	opts.helmOpsRunning = new(atomic.Bool)
	opts.policies = policy.NewGate(servesKind(served, "Policy"))
	if !opts.policies.Served() {
		ctrl.Log.WithName("policy").Info("the Policy CRD is not installed: Policies are enforced once the fleet-crd chart is upgraded (checked every " + servedRecheck.String() + ")")
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme.Scheme,
		Cache:  shardCache(opts.ShardID, !opts.DisableGitOps, !opts.DisableHelmOps),
		Client: clientOptions(opts),
		// Lists and watches on a connection of their own (watchconn.go).
		NewCache: newCacheOnOwnConnection,
		// Several managers may run in one process (shards and replicas in
		// tests, fleet dev); controller names need not be unique.
		Controller:              config.Controller{SkipNameValidation: ptr.To(true)},
		Metrics:                 metricsserver.Options{BindAddress: orDisabled(opts.MetricsAddr)},
		HealthProbeBindAddress:  orDisabled(opts.ProbeAddr),
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        leaseName(opts),
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		LeaseDuration:           &opts.LeaseDuration,
		RenewDeadline:           &opts.RenewDeadline,
		RetryPeriod:             &opts.RetryPeriod,
		// A new leader must not wait for the old one's lease to lapse when
		// the old one shuts down cleanly.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	if opts.ContentAPI.Enabled() {
		opts.ContentAPI = contentAPIOrRBAC(ctx, mgr.GetAPIReader(), opts.ContentAPI)
	}
	if !opts.ContentAPI.Enabled() && opts.ShardID == "" {
		if err := serve.SetupWithdraw(mgr); err != nil {
			return nil, err
		}
	}
	if opts.ContentAPI.Enabled() && opts.ContentAPI.Credentials == nil && credentialHandover(ctx, cfg) {
		// Every replica's content API hands registering agents their
		// credential (the agent's request may reach any of them); the
		// registration controller (unsharded) grants them.
		opts.ContentAPI.Credentials = registration.NewCredentials()
	}
	if opts.ContentAPI.Enabled() && opts.ContentAPI.Published == nil {
		// Shared by the bundle reconciler (writes) and the content API
		// (reads) of this process.
		opts.ContentAPI.Published = contentapi.NewPublished()
	}
	if creds := credentialsOf(opts); creds != nil {
		if err := creds.Setup(ctx, mgr, registrationOptions(opts)); err != nil {
			return nil, fmt.Errorf("credential hand-over: %w", err)
		}
	}
	awaited, err := setupComponents(ctx, mgr, opts, served)
	if err != nil {
		return nil, err
	}
	poller := &servedKindsPoller{cfg: cfg, policies: opts.policies, awaited: awaited,
		setup: func(ctx context.Context, c Component) error { return c.Setup(ctx, mgr, opts) }}
	if err := mgr.Add(poller); err != nil {
		return nil, err
	}
	if opts.ContentAPI.Enabled() && opts.ShardID == "" && opts.ContentAPI.FirstCheckIn == nil {
		// This replica runs the Cluster status controller when it leads:
		// a first check-in carries the status that controller would write
		// next.
		opts.ContentAPI.FirstCheckIn = clusterstatus.FirstCheckIn(mgr.GetClient(), clusterstatus.Options{OfflineThreshold: opts.OfflineThreshold})
		opts.ContentAPI.Elected = mgr.Elected()
	}
	if opts.ContentAPI.Enabled() {
		// Every replica serves; only the unsharded leader registers.
		ready, err := serve.Setup(ctx, mgr, opts.ContentAPI, opts.SystemNamespace, opts.ShardID == "")
		if err != nil {
			return nil, err
		}
		// A replica that cannot authenticate the aggregation layer yet
		// answers agents 503: not Ready, so the Service sends them to
		// another one.
		if err := mgr.AddReadyzCheck("content-api", ready); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// setupComponents sets up the components this replica runs and returns
// those whose CRD the API server does not serve yet, for the
// servedKindsPoller to set up later.
func setupComponents(ctx context.Context, mgr ctrl.Manager, opts Options, served *metav1.APIResourceList) ([]Component, error) {
	var awaited []Component
	for _, c := range components {
		if (c.Unsharded && opts.ShardID != "") || (c.Enabled != nil && !c.Enabled(opts)) {
			continue
		}
		if c.CRD != "" && !servesKind(served, c.CRD) {
			if c.SkipWithoutCRD {
				continue
			}
			ctrl.Log.WithName(c.Name).Info("the " + c.CRD + " CRD is not installed: the " + c.Name + " controller starts once the fleet-crd chart is upgraded (checked every " + servedRecheck.String() + ")")
			awaited = append(awaited, c)
			continue
		}
		if err := c.Setup(ctx, mgr, opts); err != nil {
			return nil, fmt.Errorf("setting up %s: %w", c.Name, err)
		}
	}
	return awaited, nil
}

// Run builds the manager and runs it until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	mgr, err := New(ctx, cfg, opts)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

func orDisabled(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}
