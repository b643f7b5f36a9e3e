package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/agent/heartbeat"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/manifest"
)

// agent is one simulated cluster. Its state is what a real agent needs to
// avoid redundant writes: the deploymentID it last reported per
// BundleDeployment. It does not cache BundleDeployments.
type agent struct {
	s        *Simulator
	index    int
	ns       string // downstream namespace (agent + default deploy namespace)
	clientID string
	cred     *register.Credential
	dep      *deployer.Deployer // real mode only

	// mu guards the maps below: BundleDeployments are handled
	// concurrently (up to agentWorkers at a time), like the real agent's
	// reconcile workers, and one at a time per BundleDeployment.
	mu       sync.Mutex
	applied  map[string]string // BundleDeployment name -> reported deploymentID
	failures map[string]int
	inflight map[string]bool                    // handled right now
	pending  map[string]*fleet.BundleDeployment // newest version seen meanwhile
	slots    chan struct{}
	retries  chan string
	done     <-chan struct{}
}

// How many BundleDeployments one simulated agent handles at once. In
// status-only mode it is what the real agent runs (50 reconcile workers),
// so that a cluster with many bundles is not slower than a real one; in
// real-apply mode a few keep the memory of many in-process Helm installs
// bounded.
const (
	agentWorkers     = 50
	realApplyWorkers = 8
)

func workersFor(m Mode) int {
	if m == RealApply {
		return realApplyWorkers
	}
	return agentWorkers
}

func newAgent(s *Simulator, i int) *agent {
	ns := fmt.Sprintf("%s%05d", s.opts.NamespacePrefix, i)
	return &agent{
		s: s, index: i, ns: ns,
		clientID: fmt.Sprintf("%s-%05d", s.opts.ClientIDPrefix, i),
		applied:  map[string]string{},
		failures: map[string]int{},
		inflight: map[string]bool{},
		pending:  map[string]*fleet.BundleDeployment{},
		slots:    make(chan struct{}, workersFor(s.opts.Mode)),
		retries:  make(chan string, 16),
	}
}

func (a *agent) labels() map[string]string {
	l := map[string]string{"simulator": "true", "simulator-index": strconv.Itoa(a.index)}
	for k, v := range a.s.opts.Labels {
		l[k] = v
	}
	return l
}

// run registers (retrying with backoff), then heartbeats and watches the
// cluster namespace until ctx ends.
func (a *agent) run(ctx context.Context, sem chan struct{}) {
	l := log.FromContext(ctx).WithValues("agent", a.ns)
	ctx = log.IntoContext(ctx, l)
	a.done = ctx.Done()
	wait := 2 * time.Second
	// Retries continue one registration request (register.Options.ClientRandom).
	random := register.NewClientRandom()
	for {
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		cred, err := register.Register(ctx, register.Options{PollInterval: a.s.opts.RegistrationPollInterval, ClientRandom: random},
			a.s.opts.Bootstrap, register.AgentConfig{ClientID: a.clientID, Labels: a.labels()})
		if sem != nil {
			<-sem
		}
		if err == nil {
			a.cred = cred
			// Like a real agent, give the hand-over secret back so that
			// the manager stops checking on this registration.
			if err := cred.ReleaseHandover(ctx); err != nil {
				l.Info("could not delete the registration secret; the manager will", "error", err.Error())
			}
			break
		}
		if ctx.Err() != nil {
			return
		}
		a.s.Stats.Failures.Add(1)
		l.Info("registration failed, retrying", "error", err.Error(), "in", wait.String())
		if !sleep(ctx, jitter(wait, 20)) {
			return
		}
		wait = min(wait*2, time.Minute)
	}
	a.s.Stats.Registered.Add(1)
	ctx = withAgent(ctx, a.cred.Token, a.index)
	if a.s.opts.Mode == RealApply {
		var err error
		a.dep, err = deployer.NewWithOptions(deployer.Options{
			Config: a.s.opts.Downstream, AgentNamespace: a.ns, Discovery: a.s.discovery, DefaultAccounts: a.s.accounts})
		if err != nil {
			l.Error(err, "building the deployer")
			return
		}
	}
	go a.heartbeat(ctx)
	a.watch(ctx)
}

// heartbeat patches status.agent of the Cluster, like the real agent,
// with one simulated Ready node and the interval it checks in at: the
// manager takes a cluster to be Offline after 3 × the longer of its own
// interval and the reported one, so a simulated agent that did not report
// it would flip Offline between check-ins whenever it checks in less often
// than the manager expects.
func (a *agent) heartbeat(ctx context.Context) {
	l := log.FromContext(ctx)
	node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.ns + "-node"}, Status: corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	wait := jitter(a.s.opts.FirstCheckinDelay, 100)
	retry := time.Second
	var route heartbeat.Route // as the real agent: the content API first
	for sleep(ctx, wait) {
		report := heartbeat.Status([]corev1.Node{node}, a.ns, time.Now())
		report.Agent.CheckinInterval = &metav1.Duration{Duration: a.s.opts.CheckinInterval}
		err := route.Send(ctx, func() error {
			return heartbeat.Put(ctx, a.s.fleetClient, a.cred.ClusterNamespace, a.cred.DeploymentNamespace, a.cred.ClusterName, report)
		}, func() error {
			body, err := report.MergePatch()
			if err != nil {
				return err
			}
			return a.s.fleetClient.Patch(types.MergePatchType).Namespace(a.cred.ClusterNamespace).
				Resource("clusters").Name(a.cred.ClusterName).SubResource("status").Body(body).Do(ctx).Error()
		})
		if err == nil {
			a.s.Stats.Heartbeats.Add(1)
			wait, retry = jitter(a.s.opts.CheckinInterval, 10), time.Second
			continue
		}
		if ctx.Err() != nil {
			return
		}
		l.Info("check-in failed, retrying", "error", err.Error())
		wait = jitter(retry, 20)
		retry = min(retry*2, a.s.opts.CheckinInterval)
	}
}

// watch lists and then watches the BundleDeployments of the cluster
// namespace, relisting only when the watch's resourceVersion expired.
func (a *agent) watch(ctx context.Context) {
	l := log.FromContext(ctx)
	backoff := time.Second
	for ctx.Err() == nil {
		list := &fleet.BundleDeploymentList{}
		err := a.s.fleetClient.Get().Namespace(a.cred.DeploymentNamespace).Resource("bundledeployments").Do(ctx).Into(list)
		if err != nil {
			l.Info("listing bundledeployments failed", "error", err.Error())
			if !sleep(ctx, jitter(backoff, 20)) {
				return
			}
			backoff = min(backoff*2, time.Minute)
			continue
		}
		backoff = time.Second
		a.relisted(ctx, list.Items)
		a.watchFrom(ctx, list.ResourceVersion)
	}
}

// relisted takes a fresh list of the namespace's BundleDeployments. Each is
// dispatched like a watch event, not handled here: a worker may be
// applying the same BundleDeployment right now (two Helm actions on one
// release in real-apply mode), and handling them one by one in the watch
// goroutine would hold back the watch and the retries meanwhile. What the
// agent remembers of BundleDeployments the list no longer has (deleted
// while no watch was open, so no Deleted event came) is forgotten: over a
// long run of rollouts and relists it would pile up.
func (a *agent) relisted(ctx context.Context, items []fleet.BundleDeployment) {
	listed := make(map[string]bool, len(items))
	for i := range items {
		listed[items[i].Name] = true
	}
	a.mu.Lock()
	for name := range a.applied {
		if !listed[name] {
			delete(a.applied, name)
		}
	}
	for name := range a.failures {
		if !listed[name] {
			delete(a.failures, name)
		}
	}
	for name := range a.pending {
		if !listed[name] {
			delete(a.pending, name)
		}
	}
	a.mu.Unlock()
	for i := range items {
		a.dispatch(ctx, &items[i])
	}
}

// forget drops what the agent remembers of a deleted BundleDeployment.
func (a *agent) forget(name string) {
	a.mu.Lock()
	delete(a.applied, name)
	delete(a.failures, name)
	delete(a.pending, name)
	a.mu.Unlock()
}

// watchFrom watches from rv until the resourceVersion is too old (the
// caller relists) or ctx ends; a watch that just timed out is renewed.
func (a *agent) watchFrom(ctx context.Context, rv string) {
	l := log.FromContext(ctx)
	backoff := time.Second
	for ctx.Err() == nil {
		timeout := int64(jitter(a.s.opts.WatchTimeout, 100) / time.Second)
		w, err := a.s.fleetClient.Get().Namespace(a.cred.DeploymentNamespace).Resource("bundledeployments").
			VersionedParams(&metav1.ListOptions{Watch: true, ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout},
				metav1.ParameterCodec).Watch(ctx)
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				return
			}
			l.Info("watching bundledeployments failed", "error", err.Error())
			if !sleep(ctx, jitter(backoff, 20)) {
				return
			}
			backoff = min(backoff*2, time.Minute)
			continue
		}
		backoff = time.Second
		var expired bool
		rv, expired = a.consume(ctx, w, rv)
		w.Stop()
		if expired {
			return
		}
	}
}

// consume handles the events of one watch and the agent's retries; it
// returns the last resourceVersion seen and whether it expired.
func (a *agent) consume(ctx context.Context, w watch.Interface, rv string) (string, bool) {
	for {
		select {
		case <-ctx.Done():
			return rv, false
		case name := <-a.retries:
			bd := &fleet.BundleDeployment{}
			err := a.s.fleetClient.Get().Namespace(a.cred.DeploymentNamespace).Resource("bundledeployments").Name(name).Do(ctx).Into(bd)
			switch {
			case err == nil:
				a.dispatch(ctx, bd)
			case apierrors.IsNotFound(err):
				// Deleted since it failed: its Deleted event may have
				// come before the failure was counted.
				a.forget(name)
			default:
				a.retryLater(name)
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, false
			}
			switch ev.Type {
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				return rv, apierrors.IsGone(err) || apierrors.IsResourceExpired(err)
			case watch.Bookmark, watch.Added, watch.Modified, watch.Deleted:
				if m, err := meta.Accessor(ev.Object); err == nil {
					rv = m.GetResourceVersion()
				}
			}
			bd, isBD := ev.Object.(*fleet.BundleDeployment)
			switch {
			case !isBD:
			case ev.Type == watch.Deleted:
				a.forget(bd.Name)
			case ev.Type == watch.Added || ev.Type == watch.Modified:
				a.dispatch(ctx, bd)
			}
		}
	}
}

// dispatch hands bd to a worker. While a worker handles a BundleDeployment,
// newer versions of it wait (only the newest is kept) and are handled by the
// same worker next, so one deployment is never applied twice at once.
func (a *agent) dispatch(ctx context.Context, bd *fleet.BundleDeployment) {
	a.mu.Lock()
	if a.inflight[bd.Name] {
		a.pending[bd.Name] = bd
		a.mu.Unlock()
		return
	}
	a.inflight[bd.Name] = true
	a.mu.Unlock()
	go func() {
		for {
			select {
			case a.slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			a.handle(ctx, bd)
			<-a.slots
			a.mu.Lock()
			next, ok := a.pending[bd.Name]
			delete(a.pending, bd.Name)
			if !ok {
				delete(a.inflight, bd.Name)
				a.mu.Unlock()
				return
			}
			a.mu.Unlock()
			bd = next
		}
	}()
}

// handle deploys (or pretends to) a BundleDeployment whose deploymentID
// has not been reported yet, and reports its status. Like the real agent it
// leaves a paused or off-schedule deployment alone: a Schedule's window
// opening changes the spec, and the watch brings it back.
func (a *agent) handle(ctx context.Context, bd *fleet.BundleDeployment) {
	id := bd.Spec.DeploymentID
	if id == "" || bd.DeletionTimestamp != nil || bd.Spec.Paused || bd.Spec.OffSchedule {
		return
	}
	a.mu.Lock()
	done := a.applied[bd.Name] == id
	if !done && bd.Status.AppliedDeploymentID == id && bd.Status.Ready && a.s.opts.Mode == StatusOnly {
		// Reported by an earlier run of this agent.
		a.applied[bd.Name] = id
		done = true
	}
	a.mu.Unlock()
	if done {
		return
	}
	if err := a.apply(ctx, bd); err != nil {
		if ctx.Err() != nil {
			return
		}
		if apierrors.IsConflict(err) {
			// The manager changed the deployment meanwhile: its newer
			// version is on the way (or already pending); read it again
			// at once rather than after a failure's backoff.
			go a.retry(bd.Name)
			return
		}
		a.s.Stats.Failures.Add(1)
		if unavailable := (*bundledeployment.ContentUnavailableError)(nil); errors.As(err, &unavailable) {
			// As the real agent: an overloaded or unreachable API server
			// (reading the Content or the values Secret) is retried after
			// a short fixed wait, not the failure backoff.
			log.FromContext(ctx).Info("deploy input unavailable, retrying shortly", "bundledeployment", bd.Name, "error", err.Error())
			time.AfterFunc(bundledeployment.ContentRetryAfter(), func() { a.retry(bd.Name) })
			return
		}
		log.FromContext(ctx).Info("applying bundledeployment failed", "bundledeployment", bd.Name, "error", err.Error())
		a.retryLater(bd.Name)
		return
	}
	a.mu.Lock()
	a.applied[bd.Name] = id
	delete(a.failures, bd.Name)
	a.mu.Unlock()
	a.s.Stats.Applied.Add(1)
}

func (a *agent) retryLater(name string) {
	// 1s, 2s, 4s... up to 5m: shorter than the real agent's (5s up to
	// 10m), so that a benchmark run sees a retried apply within it.
	a.mu.Lock()
	a.failures[name]++
	n := a.failures[name]
	a.mu.Unlock()
	d := min(time.Second<<min(n-1, 9), 5*time.Minute)
	time.AfterFunc(jitter(d, 20), func() { a.retry(name) })
}

// retry hands name to the watch loop to be read again and handled. It
// blocks (in the caller's own goroutine) rather than drop: every failed
// BundleDeployment must be retried.
func (a *agent) retry(name string) {
	select {
	case a.retries <- name:
	case <-a.done:
	}
}

func (a *agent) apply(ctx context.Context, bd *fleet.BundleDeployment) error {
	m, err := a.manifest(ctx, bd)
	if err != nil {
		return err
	}
	opts, err := a.options(ctx, bd)
	if err != nil {
		return err
	}
	rep := report{resources: a.s.resourcesOf(manifest.ManifestIDOf(bd.Spec.DeploymentID), m, a.ns), release: a.ns + "/" + deployer.ReleaseName(bd.Name, opts) + ":0"}
	if a.s.opts.Mode == RealApply {
		// Each simulated cluster deploys into its own namespace of the
		// shared downstream cluster.
		opts.DefaultNamespace = a.ns
		if opts.TargetNamespace != "" {
			opts.TargetNamespace = a.ns
		}
		rel, err := a.dep.Deploy(ctx, deployer.Input{Name: bd.Name, DeploymentID: bd.Spec.DeploymentID,
			Commit: bd.Labels[fleet.CommitLabel], Options: opts, Manifest: m})
		if err != nil {
			return fmt.Errorf("deploying: %w", err)
		}
		rep = report{release: rel.String(), resources: resourcesOfRelease(rel)}
	}
	// As the real agent: the whole status, under the resourceVersion the
	// watch delivered, so that it never replaces a newer one.
	up := bd.DeepCopy()
	up.Status = readyStatus(bd, rep, time.Now())
	up.APIVersion, up.Kind = fleet.GroupVersion.String(), "BundleDeployment"
	up.ManagedFields = nil // left out, the API server keeps what it has
	body, err := json.Marshal(up)
	if err != nil {
		return err
	}
	return a.s.fleetClient.Put().Namespace(bd.Namespace).Resource("bundledeployments").
		Name(bd.Name).SubResource("status").Body(body).Do(ctx).Error()
}

// manifest reads the Content named by the deploymentID with the agent's
// own credential, exactly as the real agent does
// (bundledeployment.ReadManifest): through the content API, a 403/404
// retried a few times quickly, an overloaded or unreachable API server
// reported as a *bundledeployment.ContentUnavailableError.
func (a *agent) manifest(ctx context.Context, bd *fleet.BundleDeployment) (*manifest.Manifest, error) {
	return bundledeployment.ReadManifest(ctx, a.s.contents, bd)
}

// options puts the Helm values from the values Secret back into the
// options (contract 5) exactly as the real agent does
// (bundledeployment.ReadOptions): an overloaded or unreachable API server
// is a *bundledeployment.ContentUnavailableError, retried shortly.
func (a *agent) options(ctx context.Context, bd *fleet.BundleDeployment) (fleet.BundleDeploymentOptions, error) {
	return bundledeployment.ReadOptions(ctx, bd, func(s *corev1.Secret) error {
		return a.s.coreClient.Get().Namespace(bd.Namespace).Resource("secrets").Name(bd.Name).Do(ctx).Into(s)
	})
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter spreads d by up to pct percent.
func jitter(d time.Duration, pct int64) time.Duration {
	if d <= 0 {
		return d
	}
	return d + time.Duration(rand.Int64N(int64(d)*pct/100+1))
}
