// Package helmop is the HelmOp reconciler: it turns a HelmOp (a Bundle
// spec naming a chart in a Helm or OCI repository) into one Bundle whose
// contents are the downloaded chart, re-resolves the chart version on an
// interval when the version is a range, and reports the Bundle's roll-up
// on the HelmOp status. A failed download or a bad spec leaves the last
// good Bundle, and what it deployed, in place.
package helmop

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/bundlereader"
	"github.com/fleetgo/fleet/internal/finalizer"
	"github.com/fleetgo/fleet/internal/policy"
	"github.com/fleetgo/fleet/internal/statuswrite"
)

// Finalizer makes deleting a HelmOp delete its Bundle first (with
// keepResources, once every agent has deployed keepResources).
const Finalizer = "fleet.cattle.io/helmop-finalizer"

// Options configure the HelmOp controller.
type Options struct {
	// Workers is the number of concurrent reconciles (default 4).
	Workers int
	// BundleLimits bound what a chart may hold.
	BundleLimits bundlereader.Limits
	// MinPollingInterval is the shortest polling interval honoured
	// (default 10s), so a typo cannot hammer a chart repository.
	MinPollingInterval time.Duration
	// MaxRetryInterval caps the backoff after failed builds (default 5m).
	MaxRetryInterval time.Duration
	// SystemNamespace is the manager's namespace, whose known-hosts
	// ConfigMap verifies the SSH servers of git:: charts whose helm Secret
	// has no known_hosts, as for GitRepos. Empty: no such fallback.
	SystemNamespace string
	// Policies tells whether the API server serves Policies yet (CRDs
	// that predate them): until it does they are neither watched nor
	// read, since a watch on an unknown kind would stop the manager from
	// starting. Nil: served.
	Policies *policy.Gate
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.MinPollingInterval <= 0 {
		o.MinPollingInterval = 10 * time.Second
	}
	if o.MaxRetryInterval <= 0 {
		o.MaxRetryInterval = 5 * time.Minute
	}
}

// Reconciler reconciles HelmOps.
type Reconciler struct {
	Client client.Client
	// APIReader reads Secrets without caching every Secret of the cluster.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Opts      Options

	mu sync.Mutex
	// state is the outcome of the last build per HelmOp, kept between
	// reconciles caused by Bundle status changes, which only refresh the
	// status. A restart forgets it and builds each HelmOp once.
	state map[types.NamespacedName]*buildState
	// statusRV remembers the resourceVersion of each HelmOp's status as
	// this process last wrote it or read it from the API server, so that
	// an equal status is not skipped against a cached copy older than
	// that (see writeStatus).
	statusRV statuswrite.Versions
}

// buildState is what the last build of one HelmOp did.
type buildState struct {
	generation int64        // the spec generation built (or tried)
	err        error        // nil after a success
	failures   int          // consecutive failures, for the backoff
	next       time.Time    // when to build again; zero: only on a spec change
	polled     time.Time    // when the version was last resolved
	version    string       // the version resolved then
	policy     string       // what the Policies decided then (policyStamp)
	kept       []keptBundle // the Bundles of older names pruneRenamed last kept
}

// Setup registers the reconciler with mgr.
func Setup(_ context.Context, mgr ctrl.Manager, opts Options) (*Reconciler, error) {
	opts.defaults()
	r := &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("fleet-helmop"),
		Opts:      opts,
		state:     map[types.NamespacedName]*buildState{},
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("helmop").
		For(&fleet.HelmOp{}, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{},
			predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return !e.ObjectNew.GetDeletionTimestamp().IsZero() }},
		))).
		Watches(&fleet.Bundle{}, handler.EnqueueRequestsFromMapFunc(apply.OwnerOf(fleet.HelmOpLabel)))
	c, err := b.WithOptions(controller.Options{MaxConcurrentReconciles: opts.Workers}).
		Build(r)
	if err != nil {
		return nil, err
	}
	return r, policy.Watch(mgr, opts.Policies, c, r.policyHandler())
}

// Reconcile runs: fetch → deletion → finalizer → build when due → status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	op := &fleet.HelmOp{}
	if err := r.Client.Get(ctx, req.NamespacedName, op); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !op.DeletionTimestamp.IsZero() && op.Spec.KeepResources && controllerutil.ContainsFinalizer(op, Finalizer) {
		// The Bundle goes only once the agents will keep its objects.
		waiting, err := r.keepBeforeDelete(ctx, op)
		if err != nil {
			return ctrl.Result{}, err
		}
		if waiting != "" {
			return ctrl.Result{RequeueAfter: apply.KeepPoll}, r.showKeeping(ctx, op, waiting)
		}
	}
	deleting, err := finalizer.Handle(ctx, r.Client, op, Finalizer, func(ctx context.Context) error {
		err := r.Client.DeleteAllOf(ctx, &fleet.Bundle{}, client.InNamespace(op.Namespace), client.MatchingLabelsSelector{Selector: ownSelector(op)})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if deleting {
		if err == nil {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if err != nil {
		return ctrl.Result{}, err
	}

	bundle, err := r.currentBundle(ctx, op)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The Policies are checked on every reconcile (a cache read), so that
	// a Policy change is acted upon at once.
	authorized, refusal := r.authorize(ctx, op)
	if refusal != nil && !isRefused(refusal) {
		return ctrl.Result{}, refusal
	}
	st := r.stateOf(req.NamespacedName)
	now := time.Now()
	// Build on a spec change, when polling or a retry is due, when the
	// Bundle of a successful build has gone (deleted by hand), and when
	// the Policies decide otherwise than at the last build; a failing
	// HelmOp otherwise waits for its backoff whatever else wakes it.
	due := !st.next.IsZero() && !now.Before(st.next)
	stamp := policyStamp(authorized, refusal)
	missing := bundle == nil || bundle.Name != op.Name
	if st.generation != op.Generation || due || (missing && st.err == nil) || st.policy != stamp {
		st.policy = stamp
		r.build(ctx, op, authorized, refusal, st, now)
		if bundle, err = r.currentBundle(ctx, op); err != nil {
			return ctrl.Result{}, err
		}
	}

	// Bundles of older names are pruned first, so that the status names
	// only those kept; it is written even when pruning failed (the error
	// is retried), so that the build's outcome shows, with the Bundles
	// kept last time: a failed look does not drop their note.
	kept, waiting, pruneErr := r.pruneRenamed(ctx, op)
	if pruneErr != nil {
		kept = st.kept
	}
	st.kept = kept
	if err := r.writeStatus(ctx, op, outcome{
		Err:     st.err,
		Input:   isInputError(st.err),
		Polled:  st.polled,
		Version: st.version,
		Polling: pollingInterval(op, r.Opts.MinPollingInterval) > 0,
		Built:   st.err == nil && st.generation == op.Generation,
		Kept:    kept,
	}, bundle); err != nil {
		return ctrl.Result{}, errors.Join(pruneErr, err)
	}
	if pruneErr != nil {
		return ctrl.Result{}, pruneErr
	}
	var requeue time.Duration
	if !st.next.IsZero() {
		requeue = max(time.Until(st.next), time.Second)
	}
	if waiting && (requeue == 0 || requeue > renamePoll) {
		requeue = renamePoll
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// build resolves and downloads the chart, writes the Bundle, and records
// the outcome and the next build time in st. Nothing is written when the
// build fails or the Policies refuse the HelmOp (refusal), so the deployed
// Bundle stays as it was. authorized is op with the Policies' defaults
// filled in: the Bundle is built from it; events and status go to op.
func (r *Reconciler) build(ctx context.Context, op, authorized *fleet.HelmOp, refusal error, st *buildState, now time.Time) {
	log := ctrl.LoggerFrom(ctx)
	prevErr, prevVersion := st.err, st.version
	st.generation = op.Generation
	if refusal != nil {
		// Not retried on a timer: a change of the HelmOp or of a Policy
		// (both watched) brings it back.
		st.err, st.failures, st.next = refusal, 0, time.Time{}
		if prevErr == nil || prevErr.Error() != refusal.Error() {
			r.Recorder.Eventf(op, nil, corev1.EventTypeWarning, ReasonRestricted, "Build", "%s", refusal.Error())
		}
		log.Info("helmop refused by Policy", "helmop", client.ObjectKeyFromObject(op), "error", refusal.Error())
		return
	}
	version, err := r.buildBundle(ctx, authorized)
	if err != nil {
		st.err = err
		st.failures++
		st.next = now.Add(backoff(st.failures, r.Opts.MaxRetryInterval))
		if prevErr == nil || prevErr.Error() != err.Error() {
			r.Recorder.Eventf(op, nil, corev1.EventTypeWarning, "BuildFailed", "Build", "%s", err.Error())
		}
		log.Info("helmop build failed", "helmop", client.ObjectKeyFromObject(op), "error", err.Error())
		return
	}
	st.err, st.failures, st.polled, st.version = nil, 0, now, version
	st.next = time.Time{}
	if iv := pollingInterval(op, r.Opts.MinPollingInterval); iv > 0 {
		st.next = now.Add(jitter(iv))
	}
	if version != prevVersion {
		r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "ChartVersion", "Build", "deploying chart version %s", version)
	} else if prevErr != nil {
		r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "Recovered", "Build", "chart version %s built again", version)
	}
}

// buildBundle is one build: credentials, chart, Bundle write. It returns
// the chart version the Bundle now deploys.
func (r *Reconciler) buildBundle(ctx context.Context, op *fleet.HelmOp) (string, error) {
	if err := checkVersion(op.Spec.Helm); err != nil {
		return "", &inputError{err}
	}
	var auth bundlereader.HelmAuth
	if name := op.Spec.HelmSecretName; name != "" {
		s := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: op.Namespace, Name: name}, s); err != nil {
			if apierrors.IsNotFound(err) {
				return "", &inputError{fmt.Errorf("helm secret %q not found", name)}
			}
			return "", fmt.Errorf("reading helm secret: %w", err)
		}
		auth = bundlereader.HelmAuthFromSecret(s.Data)
	}
	if err := r.configMapKnownHosts(ctx, &auth); err != nil {
		return "", err
	}
	auth.InsecureSkipTLS = auth.InsecureSkipTLS || op.Spec.InsecureSkipTLSverify
	// A github.com/, gitlab.com/ or bitbucket.org/ shorthand chart is read
	// as the git:: source it stands for; the HelmOp keeps it as written.
	spec := op.Spec.BundleSpec
	spec.Helm = chartSource(spec.Helm)
	b, err := bundlereader.ReadHelmOp(ctx, op.Name, &spec, bundlereader.Options{
		Namespace:        op.Namespace,
		Labels:           bundleLabels(op),
		Auth:             auth,
		HelmRepoURLRegex: sameHost(op.Spec.Helm),
		Limits:           r.Opts.BundleLimits,
	})
	if err != nil {
		if bundlereader.IsInvalidInput(err) {
			return "", &inputError{err}
		}
		return "", err
	}
	if _, err := apply.ApplyWithResult(ctx, r.Client, []*fleet.Bundle{b}, apply.Options{
		Namespace: op.Namespace,
		Reader:    r.APIReader,
	}); err != nil {
		if errors.Is(err, apply.ErrInvalidValues) || errors.Is(err, apply.ErrOwnedByOther) {
			// Target values that cannot be stored, or a Bundle of that
			// name that a GitRepo owns: the spec or a name must change.
			return "", &inputError{err}
		}
		return "", fmt.Errorf("writing bundle %s: %w", b.Name, err)
	}
	// A Bundle of op under another name (see pruneRenamed) goes once this
	// one has taken its deployments over.
	return b.Spec.Helm.Version, nil
}

// ownSelector selects the Bundles of op: labelled with its name and not a
// GitRepo's. The label alone does not prove the origin: a Bundle of a
// GitRepo could carry it (set by hand, or by a fleet.yaml before the
// reader refused it), and the HelmOp must then neither prune, delete nor
// report that Bundle.
func ownSelector(op *fleet.HelmOp) labels.Selector {
	own, _ := labels.NewRequirement(fleet.HelmOpLabel, selection.Equals, []string{op.Name})
	notRepo, _ := labels.NewRequirement(fleet.RepoLabel, selection.DoesNotExist, nil)
	return labels.NewSelector().Add(*own, *notRepo)
}

// checkVersion refuses a helm.version that is neither an exact version
// nor a semver constraint, whatever the chart source, before any
// repository is contacted: no retry can make it work. (The bundle reader
// checks it only where it resolves a version: repositories and OCI.)
func checkVersion(h *fleet.HelmOptions) error {
	if h == nil {
		return nil
	}
	if err := bundlereader.CheckVersion(h.Version); err != nil {
		return fmt.Errorf("spec.helm.version: %w", err)
	}
	return nil
}

// bundleLabels are the HelmOp's own labels (the shard label among them),
// spec.labels and the HelmOp label the Bundle is found by, without a
// GitRepo's label: that GitRepo would prune the Bundle as its own.
func bundleLabels(op *fleet.HelmOp) map[string]string {
	l := maps.Clone(op.Labels)
	if l == nil {
		l = map[string]string{}
	}
	maps.Copy(l, op.Spec.Labels)
	delete(l, fleet.RepoLabel)
	l[fleet.HelmOpLabel] = op.Name
	return l
}

// currentBundle reads the HelmOp's Bundle from the cache; nil when none.
func (r *Reconciler) currentBundle(ctx context.Context, op *fleet.HelmOp) (*fleet.Bundle, error) {
	var list fleet.BundleList
	if err := r.Client.List(ctx, &list, client.InNamespace(op.Namespace), client.MatchingLabelsSelector{Selector: ownSelector(op)}); err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	// The Bundle named op.Name, if any, rather than one left under an
	// older name until pruneRenamed deletes it.
	for i := range list.Items {
		if list.Items[i].Name == op.Name {
			return &list.Items[i], nil
		}
	}
	return &list.Items[0], nil
}

func (r *Reconciler) stateOf(key types.NamespacedName) *buildState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state[key]
	if st == nil {
		st = &buildState{}
		r.state[key] = st
	}
	return st
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.state, key)
	r.statusRV.Forget(key)
}

// inputError is a spec or Secret that cannot work as it stands; the HelmOp
// is not Accepted until it changes (builds are still retried, slowly, in
// case a missing Secret appears).
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

func isInputError(err error) bool {
	var ie *inputError
	return errors.As(err, &ie)
}

// backoff is the wait after the n-th consecutive failure: 5s doubling up
// to limit, with jitter.
func backoff(n int, limit time.Duration) time.Duration {
	d := 5 * time.Second
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return jitter(min(d, limit))
}

// jitter spreads d by up to +10%, so HelmOps created together do not poll
// their repositories in lockstep.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/10+1))
}
