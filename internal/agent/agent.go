package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetgo/fleet/internal/agent/heartbeat"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/kubeclient"
	"github.com/fleetgo/fleet/internal/scheme"
)

// Options configure the agent process.
type Options struct {
	// Downstream is an admin config for the cluster the agent deploys to
	// (in-cluster config, or --kubeconfig when run outside).
	Downstream *rest.Config
	// Namespace is the agent namespace downstream (cattle-fleet-system).
	Namespace string
	// CheckinInterval is the heartbeat interval (default
	// register.DefaultCheckinInterval).
	CheckinInterval time.Duration
	// FirstCheckinDelay is the wait before the first heartbeat (1s, plus up
	// to as much again at random).
	FirstCheckinDelay time.Duration
	// Workers is the number of concurrent BundleDeployment reconciles
	// (default register.DefaultWorkers).
	Workers int
	// RenewFraction is the share of a credential's lifetime after which it
	// is renewed (default 0.6).
	RenewFraction float64
	// RetryMin and RetryMax bound the jittered exponential backoff of every
	// retry of the agent loop (default 2s and 5m).
	RetryMin, RetryMax time.Duration
	// RegistrationPollInterval is the first wait between checks for a
	// granted registration (default 2s).
	RegistrationPollInterval time.Duration
	// MetricsAddr of the upstream manager; "" or "0" disables.
	MetricsAddr string
	// LeaderElection makes replicas compete for Lease fleet-agent in the
	// agent namespace; only the holder runs. A replica that loses the lease
	// stops and campaigns again (Fleet's agent exits instead).
	LeaderElection bool
	// Identity in the Lease (default $POD_NAME, else the host name).
	Identity string
	// LeaseDuration, RenewDeadline, RetryPeriod (default
	// register.DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

func (o *Options) defaults() {
	if o.Namespace == "" {
		o.Namespace = "cattle-fleet-system"
	}
	if o.CheckinInterval <= 0 {
		o.CheckinInterval = register.DefaultCheckinInterval
	}
	if o.Workers <= 0 {
		o.Workers = register.DefaultWorkers
	}
	if o.RenewFraction <= 0 || o.RenewFraction >= 1 {
		o.RenewFraction = 0.6
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 2 * time.Second
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 5 * time.Minute
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	if o.Identity == "" {
		o.Identity = os.Getenv("POD_NAME")
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = register.DefaultLeaseDuration
	}
	if o.RenewDeadline <= 0 {
		o.RenewDeadline = register.DefaultRenewDeadline
	}
	if o.RetryPeriod <= 0 {
		o.RetryPeriod = register.DefaultRetryPeriod
	}
}

// errCredentialRefused stops a registered run so that the agent registers
// again (when a new bootstrap Secret exists).
var errCredentialRefused = errors.New("cluster credential refused by the manager")

// Run is the agent: it registers (or reuses its stored credential), then
// runs every component against the manager with a cache limited to the
// cluster namespace, plus the heartbeat and credential renewal. When the
// manager refuses the credential it goes back to registration. Every
// failure is retried with jittered exponential backoff. Run returns when
// ctx ends.
func Run(ctx context.Context, opts Options) error {
	opts.defaults()
	if !opts.LeaderElection {
		return run(ctx, opts)
	}
	return lead(ctx, opts, run)
}

// lead runs fn while this process holds Lease fleet-agent in the agent
// namespace. A replica that loses the lease (the downstream API server was
// out for longer than RenewDeadline, or another replica took it over)
// stops fn, waits until fn has returned, and campaigns again: it does not
// exit, so an outage of the cluster's own API server never turns into
// container restarts. Only one fn runs at a time in this process.
func lead(ctx context.Context, opts Options, fn func(context.Context, Options) error) error {
	l := log.FromContext(ctx).WithName("fleet-agent")
	cs, err := kubernetes.NewForConfig(opts.Downstream)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		lock := &acquiredLock{Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: "fleet-agent", Namespace: opts.Namespace},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: opts.Identity},
		}}
		finished := make(chan error, 1)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: opts.LeaseDuration, RenewDeadline: opts.RenewDeadline, RetryPeriod: opts.RetryPeriod,
			ReleaseOnCancel: true, Name: "fleet-agent",
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(c context.Context) { finished <- fn(c, opts) },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return err
		}
		le.Run(ctx)
		if !lock.acquired.Load() {
			// Run returns without leading only when ctx ended.
			continue
		}
		// The elector starts fn in a goroutine of its own and cancels fn's
		// context when it returns; fn may still be stopping.
		if err := <-finished; err != nil && ctx.Err() == nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		l.Info("lost the fleet-agent lease; stopped, campaigning again")
		select {
		case <-ctx.Done():
		case <-time.After(register.Jitter(opts.RetryPeriod)):
		}
	}
	return nil
}

// acquiredLock records that this process wrote the lease as its holder.
// The elector does that before it starts OnStartedLeading in a goroutine,
// so after Run returns, acquired says whether that goroutine exists.
type acquiredLock struct {
	resourcelock.Interface
	acquired atomic.Bool
}

func (a *acquiredLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := a.Interface.Create(ctx, ler)
	if err == nil {
		a.acquired.Store(true)
	}
	return err
}

func (a *acquiredLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := a.Interface.Update(ctx, ler)
	if err == nil && ler.HolderIdentity == a.Identity() {
		a.acquired.Store(true)
	}
	return err
}

func run(ctx context.Context, opts Options) error {
	l := log.FromContext(ctx).WithName("fleet-agent")
	ctx = log.IntoContext(ctx, l)
	down, err := client.New(opts.Downstream, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return fmt.Errorf("downstream client: %w", err)
	}
	recorder, stopEvents, err := eventRecorder(opts)
	if err != nil {
		return err
	}
	defer stopEvents()
	bootstrapRef := &corev1.Secret{}
	bootstrapRef.Name, bootstrapRef.Namespace = register.BootstrapSecretName, opts.Namespace

	wait := opts.RetryMin
	// One registration request across retries (see Options.ClientRandom);
	// a new one after a success or a refused token.
	random := register.NewClientRandom()
	for ctx.Err() == nil {
		cred, err := register.Get(ctx, register.Options{Downstream: down, Namespace: opts.Namespace,
			PollInterval: opts.RegistrationPollInterval, ClientRandom: random})
		if err == nil || errors.Is(err, register.ErrRefused) {
			random = register.NewClientRandom()
		}
		if err == nil {
			wait = opts.RetryMin
			err = runRegistered(ctx, opts, down, cred)
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, errCredentialRefused) {
				l.Info("the manager refused the cluster credential; registering again once a new fleet-agent-bootstrap secret exists")
				recorder.Event(bootstrapRef, corev1.EventTypeWarning, "CredentialRefused", "the manager refused the cluster credential; apply a new registration token to register again")
				continue
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			l.Info("registration not complete, retrying", "error", err.Error(), "in", wait.String())
			recorder.Event(bootstrapRef, corev1.EventTypeWarning, "RegistrationFailed", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(register.Jitter(wait)):
		}
		wait = min(wait*2, opts.RetryMax)
	}
	return nil
}

// runRegistered runs the upstream manager with cred until ctx ends or the
// credential is refused.
func runRegistered(ctx context.Context, opts Options, down client.Client, cred *register.Credential) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	refused := func(err error) { cancel(fmt.Errorf("%w: %v", errCredentialRefused, err)) }

	upCfg := cred.RESTConfig()
	kubeclient.LimitInFlight(upCfg, 0)
	mgr, err := ctrl.NewManager(upCfg, ctrl.Options{
		Scheme: scheme.Scheme,
		// Only the cluster namespace is cached, and without managedFields
		// (nothing in the agent reads them; they are a quarter of a
		// BundleDeployment's bytes).
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{cred.DeploymentNamespace: {}},
			DefaultTransform:  cache.TransformStripManagedFields(),
		},
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		// Several agents may run in one process (tests); controller names
		// need not be unique across managers.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Logger:     log.FromContext(ctx),
	})
	if err != nil {
		return fmt.Errorf("building upstream manager: %w", err)
	}
	env, err := newEnv(ctx, opts, mgr, cred)
	if err != nil {
		return err
	}
	if err := setupComponents(ctx, env); err != nil {
		return err
	}
	// Check-ins go through the content API where the manager takes them.
	content, err := contentapi.NewRESTClient(upCfg, mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	hb := heartbeat.New(heartbeat.Options{
		Upstream: mgr.GetClient(), Downstream: down, Content: content,
		Workspace: cred.ClusterNamespace, ClusterName: cred.ClusterName, ClusterNamespace: cred.DeploymentNamespace,
		AgentNamespace: opts.Namespace,
		Interval:       opts.CheckinInterval, FirstDelay: opts.FirstCheckinDelay, OnRefused: refused,
	})
	if err := mgr.Add(hb); err != nil {
		return err
	}
	if err := mgr.Add(&renewer{down: down, ns: opts.Namespace, cred: cred, fraction: opts.RenewFraction,
		retryMin: opts.RetryMin, retryMax: opts.RetryMax, onRefused: refused}); err != nil {
		return err
	}
	err = mgr.Start(ctx)
	if cause := context.Cause(ctx); errors.Is(cause, errCredentialRefused) {
		return cause
	}
	return err
}

// newEnv is what the components of a registered run get. It reads the
// agent config's garbageCollectionInterval (ConfigMap fleet-agent) here,
// once per run, like Rancher Fleet's agent reads its config when it
// starts: a change applies once the agent restarts. A bad value is the
// default and a log line (register.LoadGCInterval); only a failed read is
// an error, which the caller retries.
func newEnv(ctx context.Context, opts Options, mgr ctrl.Manager, cred *register.Credential) (Env, error) {
	gc, err := register.LoadGCInterval(ctx, opts.Downstream, opts.Namespace)
	if err != nil {
		return Env{}, err
	}
	return Env{
		Upstream:         mgr,
		Downstream:       opts.Downstream,
		ClusterNamespace: cred.DeploymentNamespace,
		ClusterName:      cred.ClusterName,
		Workspace:        cred.ClusterNamespace,
		AgentNamespace:   opts.Namespace,
		CheckinInterval:  opts.CheckinInterval,
		Workers:          opts.Workers,
		GCInterval:       gc,
	}, nil
}

// setupComponents adds every component to env's upstream manager.
func setupComponents(ctx context.Context, env Env) error {
	for _, c := range components {
		if err := c.Setup(ctx, env); err != nil {
			return fmt.Errorf("setting up %s: %w", c.Name, err)
		}
	}
	return nil
}

// eventRecorder records the agent's problems as Events in its namespace
// downstream, next to the bootstrap Secret, where `kubectl describe` shows
// them. Messages never contain tokens.
func eventRecorder(opts Options) (record.EventRecorder, func(), error) {
	cs, err := kubernetes.NewForConfig(opts.Downstream)
	if err != nil {
		return nil, nil, err
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events(opts.Namespace)})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "fleet-agent"}), b.Shutdown, nil
}
