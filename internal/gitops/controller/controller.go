// Package controller is the GitRepo reconciler: it polls each GitRepo's
// remote with a cheap ref lookup, fetches and renders a new commit into
// Bundles in-process (no Job per commit), applies them with pruning by the
// repo-name label, and reports the Bundles' roll-up on the GitRepo status.
// A broken commit leaves the last good Bundles in place.
package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/bundlereader"
	"github.com/fleetgo/fleet/internal/finalizer"
	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/poll"
	"github.com/fleetgo/fleet/internal/gitops/webhook"
	"github.com/fleetgo/fleet/internal/policy"
	"github.com/fleetgo/fleet/internal/statuswrite"
)

// Finalizer makes deleting a GitRepo delete its Bundles first (with
// keepResources, once the agents have deployed it: keep.go).
const Finalizer = "fleet.cattle.io/gitrepo-finalizer"

// Options configure the GitRepo controller.
type Options struct {
	// SystemNamespace holds the shared webhook Secret.
	SystemNamespace string
	// WebhookAddr serves git webhooks; "" or "0" disables the receiver.
	WebhookAddr string
	// WebhookListening receives the bound webhook address (tests use ":0").
	WebhookListening func(addr string)
	// WebhookAllowUnsigned takes webhooks for providers without a key in
	// the shared webhook Secret unchecked (webhook.Handler.AllowUnsigned).
	WebhookAllowUnsigned bool
	// Workers is the number of concurrent reconciles (default 10).
	Workers int
	// GitTimeout bounds one ref lookup (default 30s); a fetch gets 4×.
	GitTimeout time.Duration
	// CheckoutLimits and BundleLimits bound what one commit may hold.
	CheckoutLimits git.Limits
	BundleLimits   bundlereader.Limits
	// Tracker schedules polls; a new one is made when nil.
	Tracker *poll.Tracker
	// Policies tells whether the API server serves Policies yet (CRDs
	// that predate them): until it does they are neither watched nor
	// read, since a watch on an unknown kind would stop the manager from
	// starting. Nil: served.
	Policies *policy.Gate
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = 10
	}
	if o.GitTimeout <= 0 {
		o.GitTimeout = git.DefaultTimeout
	}
	if o.Tracker == nil {
		o.Tracker = poll.NewTracker()
	}
}

// Reconciler reconciles GitRepos.
type Reconciler struct {
	Client client.Client
	// APIReader reads Secrets without caching every Secret of the cluster.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Opts      Options

	triggers chan event.TypedGenericEvent[*fleet.GitRepo]
	mu       sync.Mutex
	// last is the outcome of the last poll/sync per GitRepo, reused by
	// reconciles in between (Bundle status changes) so that an error stays
	// on the status until a later attempt clears it.
	last map[types.NamespacedName]syncOutcome
	// attempted is the generation/forceSyncGeneration last tried, so that a
	// failing spec change is retried on the backoff schedule, not at once.
	attempted map[types.NamespacedName][2]int64
	// granted is the service account and client Secret the last
	// successful sync of each GitRepo built with (authorize's defaults
	// included), so that a Policy or restriction default changed since
	// rebuilds its Bundles at once instead of at the next commit. After a
	// restart it is seeded with the grant of now when the Bundles' build
	// record (BuildAnnotation) matches it; when it does not, the commit is
	// built again (seedBuilt).
	granted map[types.NamespacedName][2]string
	// grantTried is the grant of the last attempt, so that a new one skips
	// the timer once, not at every wake-up while its sync fails.
	grantTried map[types.NamespacedName][2]string
	// webhooks is the webhook mark last polled for, per GitRepo.
	webhooks map[types.NamespacedName]webhookMark
	// unwritten holds what a poll and sync learnt whose status write
	// failed, until a write succeeds.
	unwritten map[types.NamespacedName]syncedFields
	// statusRV remembers the resourceVersion of each GitRepo's status as
	// this process last wrote it or read it from the API server, so that
	// an equal status is not skipped against a cached copy older than
	// that (see writeStatus).
	statusRV statuswrite.Versions
	// built names the Bundles the GitRepo's current commit produced (the
	// last successful sync's, or after a restart those found labelled
	// with status.commit when they match their build record: seedBuilt),
	// so that one deleted by someone else is built again at once
	// (goneBundles). Bundles the GitRepo's own apply prunes leave this
	// set first, so their deletion rebuilds nothing.
	built map[types.NamespacedName]map[string]bool
	// goneTried is the set of gone Bundles the last attempt rebuilt for,
	// so that it skips the timer once, not at every wake-up while that
	// rebuild fails (its backoff applies then).
	goneTried map[types.NamespacedName]string
	// bdsByRepo is the informer store of BundleDeployments, indexed by
	// their GitRepo (bdByRepo); nil when the Reconciler was not made by
	// Setup (the status then lists them through the client).
	bdsByRepo toolscache.Indexer
}

// Setup registers the reconciler (and the webhook receiver) with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) (*Reconciler, error) {
	opts.defaults()
	r := &Reconciler{
		Client:     mgr.GetClient(),
		APIReader:  mgr.GetAPIReader(),
		Recorder:   mgr.GetEventRecorder("fleet-gitops"),
		Opts:       opts,
		triggers:   make(chan event.TypedGenericEvent[*fleet.GitRepo], 128),
		last:       map[types.NamespacedName]syncOutcome{},
		attempted:  map[types.NamespacedName][2]int64{},
		granted:    map[types.NamespacedName][2]string{},
		grantTried: map[types.NamespacedName][2]string{},
		webhooks:   map[types.NamespacedName]webhookMark{},
		unwritten:  map[types.NamespacedName]syncedFields{},
		built:      map[types.NamespacedName]map[string]bool{},
		goneTried:  map[types.NamespacedName]string{},
	}
	idx, err := indexDeploymentsByRepo(ctx, mgr.GetCache())
	if err != nil {
		return nil, err
	}
	r.bdsByRepo = idx
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if opts.WebhookAddr != "" && opts.WebhookAddr != "0" {
		srv := &webhook.Server{
			Addr:      opts.WebhookAddr,
			Listening: opts.WebhookListening,
			Handler: &webhook.Handler{
				// Uncached: the receiver runs in the unsharded replica only,
				// whose cache holds no sharded GitRepo.
				Reader:          mgr.GetAPIReader(),
				SecretReader:    mgr.GetAPIReader(),
				SystemNamespace: opts.SystemNamespace,
				Trigger:         r.TriggerWebhook,
				AllowUnsigned:   opts.WebhookAllowUnsigned,
			},
		}
		if err := mgr.Add(srv); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// SetupWithManager wires the watches: GitRepo spec changes and webhook
// marks, the GitRepo's Bundles (for status), the GitRepoRestrictions and
// Policies of its namespace (checked before every poll), and in-process
// webhook triggers.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	repoPreds := predicate.Or[client.Object](
		predicate.GenerationChangedPredicate{},
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return webhookMarkOf(e.ObjectOld) != webhookMarkOf(e.ObjectNew) ||
				!e.ObjectNew.GetDeletionTimestamp().IsZero()
		}},
	)
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named("gitrepo").
		For(&fleet.GitRepo{}, builder.WithPredicates(repoPreds)).
		Watches(&fleet.Bundle{}, handler.EnqueueRequestsFromMapFunc(apply.OwnerOf(fleet.RepoLabel))).
		Watches(&fleet.GitRepoRestriction{}, r.restrictionHandler()).
		WatchesRawSource(source.Channel(r.triggers, &handler.TypedEnqueueRequestForObject[*fleet.GitRepo]{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Opts.Workers}).
		Build(r)
	if err != nil {
		return err
	}
	return policy.Watch(mgr, r.Opts.Policies, c, r.restrictionHandler())
}

// Reconcile runs: fetch → deletion → finalizer → poll/sync → status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	repo := &fleet.GitRepo{}
	if err := r.Client.Get(ctx, req.NamespacedName, repo); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !repo.DeletionTimestamp.IsZero() && repo.Spec.KeepResources && controllerutil.ContainsFinalizer(repo, Finalizer) {
		// The Bundles go only once the agents will keep their objects.
		waiting, err := r.keepBeforeDelete(ctx, repo)
		if err != nil {
			return ctrl.Result{}, err
		}
		if waiting != "" {
			return ctrl.Result{RequeueAfter: keepPoll}, r.showKeeping(ctx, repo, waiting)
		}
	}
	deleting, err := finalizer.Handle(ctx, r.Client, repo, Finalizer, func(ctx context.Context) error {
		return apply.DeleteBundles(ctx, r.Client, repo.Namespace, map[string]string{fleet.RepoLabel: repo.Name})
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

	read := repo.DeepCopy()
	out, requeue := r.pollAndSync(ctx, repo)
	r.mu.Lock()
	done := r.unwritten[req.NamespacedName].then(syncedBy(&read.Status, &repo.Status))
	r.mu.Unlock()
	if err := r.writeStatus(ctx, read, out, done); err != nil {
		// The poll and sync are done and recorded (the retry does not
		// repeat them before the next poll is due), so what they learnt
		// must reach the status with the retry.
		r.mu.Lock()
		r.unwritten[req.NamespacedName] = done
		r.mu.Unlock()
		return ctrl.Result{}, err
	}
	r.mu.Lock()
	delete(r.unwritten, req.NamespacedName)
	r.mu.Unlock()
	return ctrl.Result{RequeueAfter: requeue}, nil
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.Opts.Tracker.Forget(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.last, key)
	delete(r.attempted, key)
	delete(r.granted, key)
	delete(r.grantTried, key)
	delete(r.webhooks, key)
	delete(r.unwritten, key)
	delete(r.built, key)
	delete(r.goneTried, key)
	r.statusRV.Forget(key)
}

// bdByRepo indexes BundleDeployments by "<bundle namespace>/<repo name>"
// (their BundleNamespaceLabel and RepoLabel): the deployments of a GitRepo
// wherever their clusters are. A label selector alone scanned every
// BundleDeployment of the fleet on each GitRepo status write, and every
// Bundle status write brings one.
const bdByRepo = "fleet:bd-gitrepo"

// repoKeyOf is the bdByRepo key of a BundleDeployment; "" for one that
// belongs to no GitRepo. A namespace never contains "/", so the key names
// exactly the pair of labels the selector matched on.
func repoKeyOf(o client.Object) string {
	l := o.GetLabels()
	if l[fleet.RepoLabel] == "" || l[fleet.BundleNamespaceLabel] == "" {
		return ""
	}
	return l[fleet.BundleNamespaceLabel] + "/" + l[fleet.RepoLabel]
}

// indexDeploymentsByRepo adds bdByRepo to the cache's BundleDeployment
// informer (before the cache starts: Setup runs before the manager does)
// and returns its store. An informer index, not a field index of the
// manager: a field index keeps every object under two keys (its namespace's
// and all namespaces'), which at one BundleDeployment per bundle and
// cluster is a lot of memory for nothing, as the Bundle controller found.
func indexDeploymentsByRepo(ctx context.Context, c cache.Cache) (toolscache.Indexer, error) {
	inf, err := c.GetInformer(ctx, &fleet.BundleDeployment{})
	if err != nil {
		return nil, err
	}
	sii, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("the manager's cache does not expose informer stores (%T)", inf)
	}
	if _, done := sii.GetIndexer().GetIndexers()[bdByRepo]; done {
		// Another GitRepo reconciler on the same cache added it.
		return sii.GetIndexer(), nil
	}
	if err := sii.AddIndexers(toolscache.Indexers{bdByRepo: func(o any) ([]string, error) {
		if obj, ok := o.(client.Object); ok {
			if k := repoKeyOf(obj); k != "" {
				return []string{k}, nil
			}
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("indexing bundledeployments by gitrepo: %w", err)
	}
	return sii.GetIndexer(), nil
}

// bundleStatus reads the GitRepo's Bundles and their BundleDeployments from
// the cache. It runs on every status write of any of the GitRepo's Bundles,
// so neither is copied (a GitRepo of 50 bundles on 10,000 clusters copied
// 500,000 deployments, status included, each time): the deployments are
// the cache's own objects, the Bundles shallow copies of them, and
// summarizeBundles only reads them (it copies the one slice it keeps,
// NonReadyResources, through summary.NonReadyByBundle).
func (r *Reconciler) bundleStatus(ctx context.Context, repo *fleet.GitRepo) (bundleStatus, error) {
	var bundles fleet.BundleList
	if err := r.Client.List(ctx, &bundles, client.InNamespace(repo.Namespace), client.MatchingLabels{fleet.RepoLabel: repo.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return bundleStatus{}, err
	}
	if r.bdsByRepo == nil {
		var bds fleet.BundleDeploymentList
		if err := r.Client.List(ctx, &bds, client.MatchingLabels{fleet.RepoLabel: repo.Name, fleet.BundleNamespaceLabel: repo.Namespace}, client.UnsafeDisableDeepCopy); err != nil {
			return bundleStatus{}, err
		}
		items := make([]*fleet.BundleDeployment, len(bds.Items))
		for i := range bds.Items {
			items[i] = &bds.Items[i]
		}
		return summarizeBundles(bundles.Items, items), nil
	}
	cached, err := r.bdsByRepo.ByIndex(bdByRepo, repo.Namespace+"/"+repo.Name)
	if err != nil {
		return bundleStatus{}, err
	}
	bds := make([]*fleet.BundleDeployment, 0, len(cached))
	for _, o := range cached {
		if bd, ok := o.(*fleet.BundleDeployment); ok {
			bds = append(bds, bd)
		}
	}
	return summarizeBundles(bundles.Items, bds), nil
}
