// Package bundledeployment is the agent's reconciler of BundleDeployments:
// it watches the BundleDeployments of its cluster namespace upstream,
// deploys them downstream with the deployer, keeps their status (readiness,
// drift) current from a drift watch of the deployed objects, corrects drift
// when asked, and removes releases whose BundleDeployment is gone.
//
// It talks to the upstream API server only when something changed: the
// BundleDeployment watch, a GET of the Content and values Secret when a new
// deploymentID must be applied, and a status patch when the status really
// changed. Drift events and readiness changes are handled from downstream
// informers without any upstream read.
package bundledeployment

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/agent/drift"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/contentapi"
)

// Options configure the reconciler; agent.Env provides them.
type Options struct {
	Upstream         ctrl.Manager
	Downstream       *rest.Config
	ClusterNamespace string
	AgentNamespace   string
	Workers          int
	// GCInterval is how often releases without BundleDeployment are
	// removed: the agent passes the garbageCollectionInterval of its
	// config (Env.GCInterval). Zero is register.DefaultGCInterval (15m).
	GCInterval time.Duration
	// Resync re-evaluates every BundleDeployment this often (jittered) as a
	// safety net. Default 30m.
	Resync time.Duration
}

const (
	dependencyRequeue = 15 * time.Second
	minBackoff        = 5 * time.Second
	maxBackoff        = 10 * time.Minute
	driftThrottle     = 5 * time.Second
)

// Reconciler deploys BundleDeployments.
type Reconciler struct {
	client    client.Client // cached, cluster namespace only
	apiReader client.Reader // direct GETs of Secrets
	contents  *contentapi.Reader
	deployer  *deployer.Deployer
	watcher   *drift.Watcher
	events    chan event.GenericEvent
	opts      Options
	// runCtx ends when the reconciler stops: Setup's context, which the
	// agent also runs the upstream manager with and cancels once the
	// manager returned (a lost lease, a refused credential). A drift event
	// waiting for room in events gives up then (driftEvent).
	runCtx context.Context

	mu       sync.Mutex
	applied  map[types.NamespacedName]*appliedState
	failures map[types.NamespacedName]*failure
	// refused are the BundleDeployments whose last deploy was refused
	// because another, live BundleDeployment owns their release (the
	// owner's name, as deployer.ReleaseOwner gave it): the owner's
	// deletion retries them at once (wakeRefused), not after their backoff.
	refused map[types.NamespacedName]string
	// contentWaits are the deploy attempts whose Content could not be read
	// because the API server is overloaded or unreachable (content.go).
	contentWaits map[types.NamespacedName]contentWait

	// locks serialize what is done for one BundleDeployment: its
	// reconcile and the garbage collection of its releases (see lock).
	locks keyLocks
}

// keyLocks is one mutex per key, kept only while someone holds or waits
// for it.
type keyLocks struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int
}

// lock takes the lock of key's BundleDeployment and returns its release.
// The reconciler never runs two reconciles of one key at once; this also
// keeps the garbage collector from removing a release while a reconcile
// of its BundleDeployment deploys it.
func (r *Reconciler) lock(key types.NamespacedName) func() {
	k := &r.locks
	k.mu.Lock()
	if k.m == nil {
		k.m = map[types.NamespacedName]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// appliedState is what the agent knows of a deployed BundleDeployment, so
// that drift events need neither upstream reads nor release decoding.
type appliedState struct {
	deploymentID string
	// downstreamGen is the spec.downstreamResourcesGeneration applied: the
	// manager bumps it when a copied Secret/ConfigMap changed.
	downstreamGen  int
	release        *deployer.Release
	options        fleet.BundleDeploymentOptions
	lastCorrection time.Time
	// staleCopies: copies of entries that left downstreamResources may
	// be left from before this deploy and are to be deleted
	// (pruneStaleCopies).
	staleCopies bool
}

type failure struct {
	deploymentID string
	count        int
	next         time.Time
}

// Setup adds the reconciler and the release garbage collector to the
// upstream manager.
func Setup(ctx context.Context, o Options) error {
	if o.Workers <= 0 {
		o.Workers = 50
	}
	if o.GCInterval <= 0 {
		o.GCInterval = register.DefaultGCInterval
	}
	if o.Resync <= 0 {
		o.Resync = 30 * time.Minute
	}
	downstream, err := kubernetes.NewForConfig(o.Downstream)
	if err != nil {
		return err
	}
	accounts := deployer.NewDefaultAccounts(downstream, o.AgentNamespace)
	accounts.Start(ctx)
	dep, err := deployer.NewWithOptions(deployer.Options{
		Config: o.Downstream, AgentNamespace: o.AgentNamespace, DefaultAccounts: accounts})
	if err != nil {
		return err
	}
	contents, err := contentapi.NewReader(o.Upstream.GetConfig(), o.Upstream.GetHTTPClient())
	if err != nil {
		return err
	}
	r := &Reconciler{
		contents:     contents,
		client:       o.Upstream.GetClient(),
		apiReader:    o.Upstream.GetAPIReader(),
		deployer:     dep,
		events:       make(chan event.GenericEvent, 1024),
		runCtx:       ctx,
		opts:         o,
		applied:      map[types.NamespacedName]*appliedState{},
		failures:     map[types.NamespacedName]*failure{},
		refused:      map[types.NamespacedName]string{},
		contentWaits: map[types.NamespacedName]contentWait{},
	}
	r.watcher, err = drift.NewWatcher(ctx, drift.WatcherOptions{
		Config: o.Downstream, Label: deployer.SetHashLabel, Notify: r.driftEvent,
		Mapper: dep.Discovery().RESTMapper(),
	})
	if err != nil {
		return err
	}
	if onSetup != nil {
		onSetup(r)
	}
	inNamespace := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return obj.GetNamespace() == o.ClusterNamespace
	})
	err = ctrl.NewControllerManagedBy(o.Upstream).
		Named("bundledeployment").
		For(&fleet.BundleDeployment{}, builder.WithPredicates(inNamespace, predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WatchesRawSource(source.Channel(r.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: o.Workers,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](
				time.Second, 5*time.Minute),
		}).
		Complete(r)
	if err != nil {
		return err
	}
	return o.Upstream.Add(&collector{r: r, interval: o.GCInterval})
}

// onSetup lets this package's tests look at the reconciler they started.
var onSetup func(*Reconciler)

// driftEvent queues a BundleDeployment whose objects changed downstream.
func (r *Reconciler) driftEvent(key types.NamespacedName) {
	bd := &fleet.BundleDeployment{}
	bd.Namespace, bd.Name = key.Namespace, key.Name
	ev := event.GenericEvent{Object: bd}
	select {
	case r.events <- ev:
	default:
		// The buffer is full: the event is not dropped (its drift would
		// go unreported until the resync) but sent when there is room.
		// Once the reconciler stopped nobody reads events: the sender
		// gives up then, rather than block for good and keep the stopped
		// Reconciler alive.
		go func() {
			select {
			case r.events <- ev:
			case <-r.runCtx.Done():
			}
		}()
	}
}

// jitter spreads d by ±20% so that many agents never act in step.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Reconcile deploys when needed, then evaluates and reports status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	defer r.lock(req.NamespacedName)()
	bd := &fleet.BundleDeployment{}
	if err := r.client.Get(ctx, req.NamespacedName, bd); err != nil {
		if apierrors.IsNotFound(err) {
			err := r.cleanup(ctx, req.NamespacedName)
			r.wakeRefused(req.Name)
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, err
	}
	if bd.DeletionTimestamp != nil {
		// Its release may be taken over now (see takeOver).
		r.wakeRefused(bd.Name)
	}
	if held(bd) {
		// Paused or off schedule: no deploy, no drift watch, no status (as
		// in Fleet). Resuming, or the Schedule's window opening, picks the
		// release up from storage and watches it again, or deploys the
		// deploymentID that arrived meanwhile. A deletion still uninstalls
		// (the not-found path above).
		r.watcher.Forget(req.NamespacedName)
		r.mu.Lock()
		delete(r.applied, req.NamespacedName)
		r.mu.Unlock()
		return ctrl.Result{}, nil
	}
	orig := bd.DeepCopy()
	result, err := r.reconcile(ctx, bd)
	if statusChanged(&orig.Status, &bd.Status) {
		// An update under the cached resourceVersion: a status computed from
		// a stale object must not replace a newer one, and it costs the API
		// server less than a merge patch of the same status (no patch to
		// apply to the stored object; docs/scale.md).
		if perr := r.client.Status().Update(ctx, bd); apierrors.IsConflict(perr) && err == nil {
			return ctrl.Result{RequeueAfter: jitter(time.Second)}, nil
		} else if perr != nil {
			log.V(1).Info("status patch failed", "error", perr.Error())
			return ctrl.Result{}, errors.Join(err, perr)
		}
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if result.RequeueAfter == 0 {
		result.RequeueAfter = jitter(r.opts.Resync)
	}
	return result, nil
}

func (r *Reconciler) state(key types.NamespacedName) *appliedState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied[key]
}

func (r *Reconciler) reconcile(ctx context.Context, bd *fleet.BundleDeployment) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(bd)
	st := r.state(key)
	if st == nil && bd.Status.AppliedDeploymentID == bd.Spec.DeploymentID && bd.Spec.DeploymentID != "" {
		// Agent restarted, or the last deploy failed (see failed): pick
		// the deployed release up from storage instead of redeploying.
		// Current finds none when a later revision failed, so the spec
		// is deployed again.
		rel, err := r.deployer.Current(ctx, bd.Name, bd.Spec.Options)
		if err != nil {
			return ctrl.Result{}, err
		}
		if rel != nil && releaseApplied(bd, rel) {
			st = r.remember(key, bd, rel)
			if err := r.watcher.Watch(key, rel.Objects); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if st == nil || st.deploymentID != bd.Spec.DeploymentID || st.downstreamGen != bd.Spec.DownstreamResourcesGeneration {
		res, done, err := r.deploy(ctx, bd)
		if !done || err != nil {
			return res, err
		}
		st = r.state(key)
	} else {
		if !equalDriftOptions(st.options, bd.Spec.Options) {
			r.mu.Lock()
			st.options = *bd.Spec.Options.DeepCopy()
			r.mu.Unlock()
		}
		if bd.Status.AppliedDeploymentID != bd.Spec.DeploymentID || !meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ConditionDeployed) {
			// Deployed earlier but the status write was lost (upstream
			// unreachable, conflict): report it now.
			setDeployed(bd, st.release.String())
		}
	}
	wait := r.pruneStaleCopies(ctx, bd, st)
	res, err := r.monitor(ctx, bd, st)
	if wait > 0 && (res.RequeueAfter == 0 || wait < res.RequeueAfter) {
		res.RequeueAfter = wait
	}
	return res, err
}

// releaseApplied tells whether rel, the deployed release found in storage
// after a restart, is the one applied for the BundleDeployment's
// deploymentID. When a later deploy's status write was lost and the spec
// came back to the deploymentID the status names, storage holds the later
// deployment's release: adopting it would leave the wrong objects deployed
// and reported Ready.
func releaseApplied(bd *fleet.BundleDeployment, rel *deployer.Release) bool {
	if rel.DeploymentID != "" {
		return rel.DeploymentID == bd.Spec.DeploymentID
	}
	// Stored by an agent that did not record the deploymentID: only the
	// revision the status names will do.
	return rel.String() == bd.Status.Release
}

func equalDriftOptions(a, b fleet.BundleDeploymentOptions) bool {
	return fmt.Sprint(a.Diff, a.CorrectDrift, a.IgnoreOptions) == fmt.Sprint(b.Diff, b.CorrectDrift, b.IgnoreOptions)
}

func (r *Reconciler) remember(key types.NamespacedName, bd *fleet.BundleDeployment, rel *deployer.Release) *appliedState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &appliedState{
		deploymentID: bd.Spec.DeploymentID, downstreamGen: bd.Status.DownstreamResourcesGeneration,
		release: rel, options: *bd.Spec.Options.DeepCopy(),
	}
	r.applied[key] = st
	return st
}

// deploy applies the BundleDeployment's deploymentID. done is false when it
// waits (dependency, backoff, content unavailable) or failed; the status
// says why.
func (r *Reconciler) deploy(ctx context.Context, bd *fleet.BundleDeployment) (ctrl.Result, bool, error) {
	key := client.ObjectKeyFromObject(bd)
	if ok, msg := r.dependenciesReady(ctx, bd); !ok {
		setWaiting(bd, ReasonWaitingDependency, msg)
		return ctrl.Result{RequeueAfter: jitter(dependencyRequeue)}, false, nil
	}
	if wait := max(r.backoffRemaining(key, attemptID(bd)), r.contentWaitRemaining(key, attemptID(bd))); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, false, nil
	}
	// An overloaded or unreachable API server, for either read, is not
	// the deployment's fault: a short fixed wait, no failure backoff.
	opts, err := r.options(ctx, bd)
	if res, waiting := r.waitUnavailable(ctx, bd, err); waiting {
		return res, false, nil
	}
	if err != nil {
		setWaiting(bd, ReasonWaitingValues, err.Error())
		return ctrl.Result{RequeueAfter: r.failed(key, bd)}, false, nil
	}
	m, err := r.manifest(ctx, bd)
	if res, waiting := r.waitUnavailable(ctx, bd, err); waiting {
		return res, false, nil
	}
	var takeOver string
	if err == nil {
		// Before the namespace is prepared or anything copied into it:
		// a release another live BundleDeployment owns is refused with
		// nothing written.
		takeOver, err = r.takeOver(ctx, bd, opts)
	}
	if err == nil && len(opts.DownstreamResources) > 0 {
		// Before downstream resources are copied into it: a restricted
		// namespace must already exist and match. (Deploy checks it too,
		// for what it applies; without copies that check is enough.)
		err = r.deployer.CheckTargetNamespace(ctx, opts)
	}
	if err == nil {
		err = r.copyDownstreamResources(ctx, bd, opts, takeOver)
	}
	var rel *deployer.Release
	if err == nil {
		// valuesFrom is read as the identity the bundle deploys with.
		rel, err = r.deployer.Deploy(deployer.WithServiceAccount(ctx, opts.ServiceAccount), deployer.Input{
			Name: bd.Name, DeploymentID: bd.Spec.DeploymentID, Commit: bd.Labels[fleet.CommitLabel],
			Options: opts, Manifest: m, TakeOver: takeOver,
		})
	}
	r.noteRefused(key, err)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("deploy failed", "error", err.Error())
		setDeployError(bd, err)
		return ctrl.Result{RequeueAfter: r.failed(key, bd)}, false, nil
	}
	// Copies of entries that left the list go only now (the release
	// deployed before may have used them), after the success is recorded:
	// a failure to delete them is reported and retried on its own
	// (pruneStaleCopies), never by deploying again. Asked of what was
	// applied before, which remember replaces.
	stale := r.staleCopiesDue(key, bd, opts)
	r.mu.Lock()
	delete(r.failures, key)
	delete(r.contentWaits, key)
	r.mu.Unlock()
	setDeployed(bd, rel.String())
	st := r.remember(key, bd, rel)
	r.mu.Lock()
	st.staleCopies = stale
	r.mu.Unlock()
	if err := r.watcher.Watch(key, rel.Objects); err != nil {
		return ctrl.Result{}, false, err
	}
	return ctrl.Result{}, true, nil
}

// failed records a failed deploy attempt and returns how long to wait
// before retrying it. It also forgets what was remembered as applied: the
// attempt may have changed objects downstream (Helm applies what it can,
// then records the revision failed), so when the spec names the earlier
// deploymentID again (the commit was reverted) that deploymentID must be
// deployed, not taken as still in place. The next reconcile looks at the
// release storage instead (Current), as after a restart.
func (r *Reconciler) failed(key types.NamespacedName, bd *fleet.BundleDeployment) time.Duration {
	r.mu.Lock()
	delete(r.applied, key)
	r.mu.Unlock()
	return r.recordFailure(key, attemptID(bd))
}

// attemptID identifies what a deploy attempt applies: the deploymentID
// and the generation of the downstream resources copied with it, so that a
// changed copy is tried at once instead of waiting for the old backoff.
func attemptID(bd *fleet.BundleDeployment) string {
	return fmt.Sprintf("%s/%d", bd.Spec.DeploymentID, bd.Spec.DownstreamResourcesGeneration)
}

// backoffRemaining is how long a failed deploymentID must still wait; any
// event before then (a label change, a drift event) does not retry it.
func (r *Reconciler) backoffRemaining(key types.NamespacedName, deploymentID string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failures[key]
	if f == nil || f.deploymentID != deploymentID {
		return 0
	}
	return time.Until(f.next)
}

// recordFailure schedules the next attempt with jittered exponential
// backoff (5s doubling up to 10m).
func (r *Reconciler) recordFailure(key types.NamespacedName, deploymentID string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failures[key]
	if f == nil || f.deploymentID != deploymentID {
		f = &failure{deploymentID: deploymentID}
		r.failures[key] = f
	}
	d := minBackoff << min(f.count, 10)
	if d > maxBackoff {
		d = maxBackoff
	}
	f.count++
	d = jitter(d)
	f.next = time.Now().Add(d)
	return d
}

// monitor evaluates the deployed objects and, when correctDrift is on and
// something drifted, restores them.
func (r *Reconciler) monitor(ctx context.Context, bd *fleet.BundleDeployment, st *appliedState) (ctrl.Result, error) {
	r.mu.Lock()
	rel, opts := st.release, st.options
	r.mu.Unlock()
	eval := func() (drift.Result, error) {
		return drift.Evaluate(rel.Objects, func(d *unstructuredObj) (*unstructuredObj, error) {
			return r.watcher.Live(ctx, d)
		}, driftOptions(opts))
	}
	res, err := eval()
	if err != nil {
		return ctrl.Result{}, err
	}
	cd := bd.Spec.CorrectDrift
	if cd == nil {
		cd = opts.CorrectDrift
	}
	var requeue time.Duration
	if !res.NonModified && cd != nil && cd.Enabled {
		r.mu.Lock()
		since := time.Since(st.lastCorrection)
		if since >= driftThrottle {
			st.lastCorrection = time.Now()
		}
		r.mu.Unlock()
		if since < driftThrottle {
			requeue = driftThrottle - since
		} else if err := r.deployer.CorrectDrift(ctx, bd.Name, opts, *cd); err != nil {
			ctrl.LoggerFrom(ctx).Info("drift correction failed", "error", err.Error())
			requeue = jitter(30 * time.Second)
		}
		// The informers report the restored objects; that event
		// re-evaluates, so the status shows Modified only until then.
	}
	setMonitored(bd, res)
	return ctrl.Result{RequeueAfter: requeue}, nil
}

func driftOptions(o fleet.BundleDeploymentOptions) drift.Options {
	out := drift.Options{}
	if o.Diff != nil {
		out.ComparePatches = o.Diff.ComparePatches
	}
	if o.IgnoreOptions != nil {
		out.IgnoreConditions = o.IgnoreOptions.Conditions
	}
	return out
}

// cleanup uninstalls the releases of a BundleDeployment that is gone
// (keeping the objects when it asked for keepResources) and deletes its
// copies of downstreamResources (also kept with keepResources), as Rancher
// Fleet does when a cluster is no longer targeted; not a release another
// live BundleDeployment claims (claimedByOthers). Each release is removed
// as the identity that deployed it (deployer.Uninstall), each copy as the
// identity that made it: what that identity may not do fails the clean-up,
// which is retried (the reconcile's backoff, then garbage collection) and
// never done with the agent's own identity instead.
func (r *Reconciler) cleanup(ctx context.Context, key types.NamespacedName) error {
	r.watcher.Forget(key)
	r.mu.Lock()
	st := r.applied[key]
	delete(r.applied, key)
	delete(r.failures, key)
	delete(r.refused, key)
	delete(r.contentWaits, key)
	r.mu.Unlock()
	all, err := r.deployer.Releases(ctx)
	if err != nil {
		return err
	}
	var refs []deployer.ReleaseRef
	var releaseNS []string
	for _, ref := range all {
		if ref.BundleDeployment == key.Name {
			refs = append(refs, ref)
			releaseNS = append(releaseNS, ref.Namespace)
		}
	}
	// A release another live BundleDeployment claims (the app moved to
	// another bundle) is left for it to take over, with the copies in its
	// namespace, which the new one may use or adopt.
	handedOver, keptNS, err := r.claimedByOthers(ctx, key, refs)
	if err != nil {
		return err
	}
	keep := st != nil && st.options.KeepResources
	for _, ref := range refs {
		keep = keep || ref.KeepResources
	}
	// Copies first: a failed uninstall keeps the release stored, so a
	// retry still knows keepResources.
	if !keep {
		if err := r.removeCopies(ctx, key.Name, st, releaseNS, keptNS, st != nil || len(refs) > 0); err != nil {
			return err
		}
	}
	var errs []error
	for _, ref := range refs {
		if handedOver[ref] {
			ctrl.LoggerFrom(ctx).Info("keeping release another bundledeployment claims, for it to take over",
				"release", ref.Namespace+"/"+ref.Name, "bundledeployment", key.Name)
			continue
		}
		in := deployer.UninstallInput{
			ReleaseName: ref.Name, Namespace: ref.Namespace, BundleDeployment: key.Name,
			KeepResources: ref.KeepResources, DeleteNamespace: ref.DeleteNamespace,
		}
		if st != nil {
			in.ServiceAccount = st.options.ServiceAccount
		}
		errs = append(errs, r.deployer.Uninstall(ctx, in))
	}
	return errors.Join(errs...)
}
