// Package simulator runs many simulated Fleet agents in one process, so that
// a laptop can stand in for a fleet of thousands of clusters (Fleet had
// `fleet-agent --simulators N` until v0.7).
//
// Every simulated agent is a real client of the manager: it registers
// through the real token flow (register.Register: a ClusterRegistration
// with its own clientID, then the granted credential), and from then on
// uses only its own ServiceAccount token, its own watch on its own cluster
// namespace, its own Content and values-Secret GETs, and its own heartbeat
// patch of its Cluster status. What is shared is only the process: one
// HTTP/2 transport to the manager's API server (each request carries its
// agent's token), so that an agent costs a few goroutines and kilobytes
// rather than a controller-runtime manager with its own connections.
//
// Two modes:
//   - status-only: the agent reports a BundleDeployment Ready as soon as it
//     has read its Content (and values Secret); no downstream cluster is
//     touched. This isolates the manager and the upstream API server.
//   - real: the agent renders and installs the bundle with the real Helm
//     deployer into one shared downstream API server, with its own default
//     namespace (<prefix><index>), and reports the release.
package simulator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/scheme"
)

// Mode is how a simulated agent applies a BundleDeployment.
type Mode string

// Modes of --simulate-apply.
const (
	StatusOnly Mode = "status-only"
	RealApply  Mode = "real"
)

// ParseMode validates a --simulate-apply value.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case StatusOnly, RealApply:
		return Mode(s), nil
	case "":
		return StatusOnly, nil
	}
	return "", fmt.Errorf("--simulate-apply must be %q or %q, not %q", StatusOnly, RealApply, s)
}

// Options configure a set of simulated agents.
type Options struct {
	// Count is the number of simulated agents.
	Count int
	// Bootstrap is the registration token data (fleet-agent-bootstrap).
	Bootstrap *register.Bootstrap
	// Mode is status-only (default) or real.
	Mode Mode
	// Downstream is the shared downstream cluster (real mode only).
	Downstream *rest.Config
	// NamespacePrefix names each agent's downstream namespace
	// (<prefix><index %05d>, default "sim"); real mode deploys there.
	NamespacePrefix string
	// ClientIDPrefix makes each agent's clientID (<prefix>-<index %05d>);
	// it must be unique per simulator process that shares a manager.
	ClientIDPrefix string
	// Labels are added to every simulated cluster's labels, besides
	// simulator=true and simulator-index=<i>.
	Labels map[string]string
	// CheckinInterval is the heartbeat interval (default 15m), reported
	// in status.agent.checkinInterval as a real agent does; the first
	// heartbeat is sent FirstCheckinDelay after registration (default 1s,
	// jittered), so that a harness can see that an agent is up.
	CheckinInterval   time.Duration
	FirstCheckinDelay time.Duration
	// Concurrency bounds how many agents register at the same time
	// (default 0: all at once, as when a fleet of clusters boots).
	Concurrency int
	// WatchTimeout is the server-side timeout of each watch (default
	// 30-60m, randomized like client-go reflectors but longer, since an
	// idle agent should cost almost nothing).
	WatchTimeout time.Duration
	// RegistrationPollInterval is the first wait between checks for the
	// granted credential (default 2s, as the real agent).
	RegistrationPollInterval time.Duration
}

func (o *Options) defaults() error {
	if o.Count <= 0 {
		return errors.New("simulator: count must be > 0")
	}
	if o.Bootstrap == nil {
		return errors.New("simulator: bootstrap data is required")
	}
	if o.Mode == "" {
		o.Mode = StatusOnly
	}
	if o.Mode == RealApply && o.Downstream == nil {
		return errors.New("simulator: real apply needs a downstream cluster (--kubeconfig)")
	}
	if o.NamespacePrefix == "" {
		o.NamespacePrefix = "sim"
	}
	if o.ClientIDPrefix == "" {
		o.ClientIDPrefix = "simulator"
	}
	if o.CheckinInterval <= 0 {
		o.CheckinInterval = 15 * time.Minute
	}
	if o.FirstCheckinDelay <= 0 {
		o.FirstCheckinDelay = time.Second
	}
	if o.WatchTimeout <= 0 {
		o.WatchTimeout = 30 * time.Minute
	}
	if o.RegistrationPollInterval <= 0 {
		o.RegistrationPollInterval = 2 * time.Second
	}
	return nil
}

// Stats are counters of a running simulator, safe to read concurrently.
type Stats struct {
	Registered atomic.Int64
	Applied    atomic.Int64
	Failures   atomic.Int64
	Heartbeats atomic.Int64
}

// Simulator is a set of simulated agents.
type Simulator struct {
	opts  Options
	Stats Stats

	fleetClient rest.Interface
	coreClient  rest.Interface
	// discovery of the shared downstream cluster (real mode): one cache
	// for every agent, instead of a discovery per agent and install.
	discovery *deployer.Discovery
	// accounts watches the DefaultServiceAccount of every agent namespace
	// of the shared downstream cluster (real mode): one watch, not one
	// per agent on one connection.
	accounts *deployer.DefaultAccounts
	// contents reads Contents for every agent (with the agent's token from
	// the request context).
	contents *contentapi.Reader
	// objects caches the objects of each manifest (by manifest ID, which
	// is its hash) for status-only reports: every agent of a rollout gets
	// the same manifest, and parsing its YAML once per agent was a sixth
	// of the process's CPU in the 50x50 scenario. It is bounded (see
	// objectCache): each rollout brings new IDs, and a long run must not
	// keep every manifest it ever saw.
	objects objectCache
}

// New checks the options and builds the shared upstream clients.
func New(opts Options) (*Simulator, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	s := &Simulator{opts: opts}
	rt, err := newPooledTransport(opts.Bootstrap)
	if err != nil {
		return nil, err
	}
	if s.fleetClient, err = sharedClient(opts.Bootstrap, rt, "/apis", &fleet.GroupVersion); err != nil {
		return nil, err
	}
	if s.coreClient, err = sharedClient(opts.Bootstrap, rt, "/api", &corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	s.contents = &contentapi.Reader{REST: s.fleetClient}
	if opts.Mode == RealApply {
		if s.discovery, err = deployer.NewDiscovery(opts.Downstream); err != nil {
			return nil, err
		}
		cs, err := kubernetes.NewForConfig(opts.Downstream)
		if err != nil {
			return nil, err
		}
		s.accounts = deployer.NewDefaultAccounts(cs, "")
	}
	return s, nil
}

// Run starts every agent and blocks until ctx ends. An agent that fails
// to register retries with backoff, like the real agent; Run itself only
// fails on bad options.
func (s *Simulator) Run(ctx context.Context) error {
	l := log.FromContext(ctx).WithName("simulator")
	l.Info("starting simulated agents", "count", s.opts.Count, "mode", s.opts.Mode)
	if s.accounts != nil {
		s.accounts.Start(ctx)
	}
	var sem chan struct{}
	if s.opts.Concurrency > 0 {
		sem = make(chan struct{}, s.opts.Concurrency)
	}
	var wg sync.WaitGroup
	for i := range s.opts.Count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := newAgent(s, i)
			a.run(ctx, sem)
		}()
	}
	wg.Wait()
	return nil
}

// agentKey carries, in a request context, the agent making the request:
// the shared client sets the Authorization header from its credential and
// sends the request over its group's connections.
type agentKey struct{}

// tokenFunc returns the bearer token of the agent making a request.
type tokenFunc func() string

type agentRef struct {
	token tokenFunc
	index int
}

func withAgent(ctx context.Context, f tokenFunc, index int) context.Context {
	return context.WithValue(ctx, agentKey{}, agentRef{token: f, index: index})
}

// agentsPerPool is how many simulated agents share one connection pool.
// Each agent keeps a watch open, and a kube-apiserver allows 100 streams
// per HTTP/2 connection: 50 agents fill about half of one connection with
// watches and leave the rest to their requests, much as separate agents
// would each use their own connection.
const agentsPerPool = 50

// pooledTransport sends each agent's requests, with its token, over its
// group's golang.org/x/net/http2 transport. That transport adds a
// connection when all streams of the others are taken, one dial at a time
// (net/http's HTTP/2 dials one per waiting request — hundreds of TLS
// handshakes in a burst, which the API server pays for too); and one pool
// per group keeps that one dial from stalling every agent of the process
// while a busy API server completes the handshake. x/net marks this
// transport deprecated in favour of net/http's, which dials as above, so
// it stays.
type pooledTransport struct {
	tls   *tls.Config
	mu    sync.Mutex
	pools map[int]http.RoundTripper
}

func newPooledTransport(b *register.Bootstrap) (*pooledTransport, error) {
	// client-go's own reading of the CA, as for any other client.
	tc, err := rest.TLSConfigFor(&rest.Config{Host: b.APIServerURL, TLSClientConfig: rest.TLSClientConfig{CAData: b.APIServerCA}})
	if err != nil {
		return nil, fmt.Errorf("simulator: API server CA: %w", err)
	}
	return &pooledTransport{tls: tc, pools: map[int]http.RoundTripper{}}, nil
}

func (t *pooledTransport) pool(group int) http.RoundTripper {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pools[group]
	if p == nil {
		//lint:ignore SA1019 net/http's HTTP/2 dials once per waiting request (see pooledTransport).
		p = &http2.Transport{TLSClientConfig: t.tls, ReadIdleTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
		t.pools[group] = p
	}
	return p
}

func (t *pooledTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	a, ok := req.Context().Value(agentKey{}).(agentRef)
	if !ok || a.token == nil {
		return nil, errors.New("simulator: request without an agent credential")
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+a.token())
	return t.pool(a.index / agentsPerPool).RoundTrip(req)
}

// sharedClient is one REST client for all agents of the process, over
// rt; it has no rate limiter (each agent is one client of its own) and no
// credential of its own: every request must carry its agent in its
// context.
func sharedClient(b *register.Bootstrap, rt http.RoundTripper, apiPath string, gv *schema.GroupVersion) (rest.Interface, error) {
	cfg := &rest.Config{
		Host:      b.APIServerURL,
		QPS:       -1,
		UserAgent: "fleet-agent-simulator",
		Transport: rt,
	}
	cfg.APIPath = apiPath
	cfg.GroupVersion = gv
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme.Scheme).WithoutConversion()
	return rest.RESTClientFor(cfg)
}
