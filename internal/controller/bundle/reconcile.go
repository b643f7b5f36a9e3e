package bundle

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/kubeclient"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/target"
)

// Finalizer keeps a Bundle until its BundleDeployments are deleted.
const Finalizer = "fleet.cattle.io/bundle-finalizer"

// resync is the long periodic re-check; events drive everything else.
const resync = 30 * time.Minute

// largePass is the number of visible clusters from which a pass counts as
// large. Each large pass holds a plan and a copy of every target's
// deployment until it ends: with ten 10,000-cluster bundles reconciling at
// once that was 140 MiB of the manager's heap. At most maxLargePasses run
// at once; other workers (small bundles) are not held up.
const (
	largePass      = 1000
	maxLargePasses = 2
)

// moreToCreate requeues soon when maxNew held back creations.
const moreToCreate = 200 * time.Millisecond

func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d/5)+1))
}

// onReconcile is called at the start of each reconcile; tests count a
// Bundle's reconciles with it (export_test.go) to tell a Bundle that waits
// for a change from one retried in a loop.
var onReconcile = func(types.NamespacedName) {}

// Reconcile is fetch → deletion → finalizer → targets → contents →
// deployments → status.
func (r *Reconciler) Reconcile(ctx context.Context, rq ctrl.Request) (ctrl.Result, error) {
	onReconcile(rq.NamespacedName)
	b := &fleet.Bundle{}
	if err := r.Get(ctx, rq.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			return r.gone(ctx, rq.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if b.DeletionTimestamp != nil {
		return r.finalize(ctx, b)
	}
	if !controllerutil.ContainsFinalizer(b, Finalizer) {
		patch := client.MergeFrom(b.DeepCopy())
		controllerutil.AddFinalizer(b, Finalizer)
		if err := r.Patch(ctx, b, patch); err != nil {
			return ctrl.Result{}, err
		}
	}
	oldStatus := b.Status.DeepCopy()
	res, err := r.reconcileTargets(ctx, b)
	r.reportInvalidName(b, oldStatus)
	statusWait, perr := r.patchStatus(ctx, b, oldStatus)
	if perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		var be *target.BundleError
		if errors.As(err, &be) {
			// Bad input: the status says why; wait for the Bundle to change.
			return ctrl.Result{RequeueAfter: sooner(jitter(resync), statusWait)}, nil
		}
		return ctrl.Result{}, err
	}
	res.RequeueAfter = sooner(res.RequeueAfter, statusWait)
	return res, nil
}

// sooner is the shorter of two requeue delays, 0 meaning none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// deleteDeployments deletes the bundle's deployments (and their values
// Secrets) except those in keep, returning how many the cache still shows.
func (r *Reconciler) deleteDeployments(ctx context.Context, bundleKey string, keep map[string]bool) (int, error) {
	// Read-only use of the cached objects (Delete does not modify them).
	bds, err := r.objs.DeploymentsOf(bundleKey)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, bd := range bds {
		if keep[bd.Namespace] || bd.Labels[fleet.ShardLabel] != r.Opts.ShardID {
			// Another shard's deployment (the unsharded replica caches
			// them all) is never ours to delete.
			continue
		}
		n++
		if bd.DeletionTimestamp != nil {
			continue
		}
		if err := r.deleteDeployment(ctx, bd); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (r *Reconciler) deleteDeployment(ctx context.Context, bd *fleet.BundleDeployment) error {
	r.forgetWrite(client.ObjectKeyFromObject(bd))
	if err := r.Delete(ctx, bd, client.Preconditions{UID: &bd.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting BundleDeployment %s/%s: %w", bd.Namespace, bd.Name, err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: bd.Namespace, Name: bd.Name}}
	if err := r.Delete(ctx, sec); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting values Secret %s/%s: %w", bd.Namespace, bd.Name, err)
	}
	return r.deleteDownstreamCopies(ctx, bd)
}

// reconcileTargets does the work and records its outcome in b.Status.
func (r *Reconciler) reconcileTargets(ctx context.Context, b *fleet.Bundle) (ctrl.Result, error) {
	// A name no BundleDeployment can carry: refused before anything is
	// written (no Content, grant or values), and nothing deployed is
	// deleted.
	if err := bundleNameError(b.Name); err != nil {
		setRejected(b, ReasonInvalidName, err)
		return ctrl.Result{}, err
	}
	m, err := manifest.New(b.Spec.Resources)
	if err != nil {
		err = &target.BundleError{Err: fmt.Errorf("reading resources: %w", err)}
		setError(b, err)
		return ctrl.Result{}, err
	}
	sum, err := m.SHA256()
	if err != nil {
		return ctrl.Result{}, err
	}
	manifestID := manifest.IDFromSHA(sum)
	if b.Spec.ContentsID != "" {
		manifestID = b.Spec.ContentsID
	}
	// Targets are computed from the Bundle with its Helm values, which
	// may live in its values Secret; b itself never carries them.
	vb, err := r.bundleWithValues(ctx, b)
	if err != nil {
		var be *target.BundleError
		switch {
		case errors.Is(err, errValuesPending):
			setValuesPending(b, err)
			delay := r.valuesRetryAfter(client.ObjectKeyFromObject(b))
			onValuesRetry(client.ObjectKeyFromObject(b), delay)
			return ctrl.Result{RequeueAfter: jitter(delay)}, nil
		case errors.As(err, &be):
			setError(b, err)
		}
		return ctrl.Result{}, err
	}
	in, err := targetInput(ctx, r.Client, r.objs, vb, manifestID)
	if err != nil {
		// Before any write or delete: what is deployed stays.
		setTargetInputError(b, err)
		return ctrl.Result{}, err
	}
	if len(in.Clusters) >= largePass {
		select {
		case r.largePasses <- struct{}{}:
			defer func() { <-r.largePasses }()
		case <-ctx.Done():
			return ctrl.Result{}, ctx.Err()
		}
	}
	targets, err := computeTargets(ctx, r.policyReader(), in)
	if err != nil {
		var be *target.BundleError
		if errors.As(err, &be) {
			setError(b, err)
		}
		return ctrl.Result{}, err
	}
	if len(targets) > 0 && b.Spec.ContentsID == "" {
		if err := r.ensureContent(ctx, m, manifestID, sum); err != nil {
			return ctrl.Result{}, err
		}
	}
	existing, err := r.existingDeployments(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}
	plans := make([]*target.Plan, 0, len(targets))
	keep := map[string]bool{}
	var failed []*target.Target
	var pendingEnds time.Duration
	for _, t := range targets {
		if keeps(t, existing[t.Cluster.Status.Namespace]) {
			keep[t.Cluster.Status.Namespace] = true
		}
		if t.Err != nil {
			if !t.Pending {
				failed = append(failed, t)
			}
			pendingEnds = sooner(pendingEnds, pendingLeft(t, in.Now))
			continue
		}
		p := &target.Plan{Target: t}
		if bd := existing[t.Cluster.Status.Namespace]; bd != nil {
			p.Deployment = planCopy(bd)
		}
		plans = append(plans, p)
	}
	rollout, err := target.Rollout(b, plans, func(t *target.Target) *fleet.BundleDeployment {
		return &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Namespace: t.Cluster.Status.Namespace}}
	})
	if err != nil {
		err = &target.BundleError{Err: err}
		setError(b, err)
		return ctrl.Result{}, err
	}
	// Writes are independent: run a few at once so that API latency, not
	// the number of clusters, bounds a pass.
	var (
		mu      sync.Mutex
		errs    []error
		srcErrs []string
		g       errgroup.Group
	)
	g.SetLimit(r.Opts.ParallelWrites)
	pass := withPassCredentials(ctx)
	for _, p := range plans {
		if p.Deployment == nil {
			continue
		}
		g.Go(func() error {
			if err := r.writeDeployment(pass, b, manifestID, p, existing[p.Target.Cluster.Status.Namespace]); err != nil {
				mu.Lock()
				if errors.Is(err, ErrDownstreamSource) {
					srcErrs = append(srcErrs, fmt.Sprintf("cluster %s: %v", p.Target.Key(), err))
				} else {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	if err := r.holdOffSchedule(ctx, existing, keep); err != nil {
		errs = append(errs, err)
	} else if _, err := r.deleteDeployments(ctx, b.Namespace+"/"+b.Name, keep); err != nil {
		errs = append(errs, err)
	}
	prevObserved := b.Status.ObservedGeneration
	setStatus(b, statusInput{Plans: plans, Failed: failed, Rollout: rollout, SHA256: sum})
	setSourceErrors(b, srcErrs)
	if len(errs) > 0 {
		setWriteErrors(b, errs, prevObserved)
		return ctrl.Result{}, errors.Join(errs...)
	}
	if rollout.NewlyCreated >= rollout.MaxNew && pendingCreations(plans) {
		return ctrl.Result{RequeueAfter: moreToCreate}, nil
	}
	return ctrl.Result{RequeueAfter: sooner(jitter(resync), pendingEnds)}, nil
}

// pendingLeft is how long until t stops being Pending (0: not Pending), a
// little after, so that the pass that follows reports it.
func pendingLeft(t *target.Target, now time.Time) time.Duration {
	if !t.Pending || t.PendingUntil.IsZero() {
		return 0
	}
	return jitter(t.PendingUntil.Sub(now) + time.Second)
}

// planCopy copies what a pass may modify of a cached deployment: its
// metadata and spec. The status is shared with the cache, read only (the
// rollout and the Bundle summary read it; putDeployment drops it before a
// write). Deep-copying every target's status (resource lists, conditions)
// on every pass was most of the copying at 10,000 clusters.
func planCopy(bd *fleet.BundleDeployment) *fleet.BundleDeployment {
	out := &fleet.BundleDeployment{TypeMeta: bd.TypeMeta, Status: bd.Status}
	bd.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	bd.Spec.DeepCopyInto(&out.Spec)
	return out
}

func pendingCreations(plans []*target.Plan) bool {
	for _, p := range plans {
		if p.Deployment == nil {
			return true
		}
	}
	return false
}

// TargetInput gathers every cluster the bundle can see and the
// restrictions of its namespace. The controller reads them from its cache;
// `fleet target` from the API server.
func TargetInput(ctx context.Context, r client.Reader, b *fleet.Bundle, manifestID string) (target.Input, error) {
	return targetInput(ctx, r, nil, b, manifestID)
}

// targetInput is TargetInput reading Clusters from objs when it is set.
func targetInput(ctx context.Context, r client.Reader, objs *CachedObjects, b *fleet.Bundle, manifestID string) (target.Input, error) {
	in := target.Input{Bundle: b, ManifestID: manifestID, Offline: IsOffline, Now: time.Now()}
	namespaces, err := bundleNamespaces(ctx, r, objs, b)
	if err != nil {
		return in, err
	}
	for _, ns := range namespaces {
		clusters, err := clustersIn(ctx, r, objs, ns)
		if err != nil {
			return in, err
		}
		if len(clusters) == 0 {
			continue
		}
		groups := &fleet.ClusterGroupList{}
		if err := r.List(ctx, groups, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return in, err
		}
		gs := pointers(groups.Items)
		for _, c := range clusters {
			if !clusterNameFits(c) {
				// No BundleDeployment can be written for it.
				continue
			}
			in.Clusters = append(in.Clusters, target.NewClusterInfo(c, gs))
		}
	}
	if err := target.UnknownGroups(b, in.Clusters); err != nil {
		return in, &target.BundleError{Err: err}
	}
	restrictions := &fleet.GitRepoRestrictionList{}
	if err := r.List(ctx, restrictions, client.InNamespace(b.Namespace)); err != nil {
		return in, err
	}
	for i := range restrictions.Items {
		in.Restrictions = append(in.Restrictions, &restrictions.Items[i])
	}
	if repo := b.Labels[fleet.RepoLabel]; repo != "" && len(in.Restrictions) > 0 {
		gr := &fleet.GitRepo{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: repo}, gr); err == nil {
			in.RepoURL = gr.Spec.Repo
		}
	}
	return in, nil
}

// clustersIn lists a namespace's Clusters, from the informer store when objs
// is set. Targeting only reads them.
func clustersIn(ctx context.Context, r client.Reader, objs *CachedObjects, ns string) ([]*fleet.Cluster, error) {
	if objs != nil {
		return objs.ClustersIn(ns)
	}
	list := &fleet.ClusterList{}
	if err := r.List(ctx, list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return pointers(list.Items), nil
}

// pointers returns pointers to a list's items, in place.
func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// bundleNamespaces is the bundle's namespace plus those selected by the
// BundleNamespaceMappings of its namespace that select the bundle. A
// mapping that could select it but cannot be evaluated is an error
// (mappedNamespaces), not skipped: skipping would drop the clusters of
// the namespaces it maps and delete their deployments (objs, when set,
// tells which deployments the bundle has). Mappings are
// looked at by name, so that with several invalid ones the bundle's
// message names the same one on every reconcile.
func bundleNamespaces(ctx context.Context, r client.Reader, objs *CachedObjects, b *fleet.Bundle) ([]string, error) {
	out := []string{b.Namespace}
	mappings := &fleet.BundleNamespaceMappingList{}
	if err := r.List(ctx, mappings, client.InNamespace(b.Namespace)); err != nil {
		return nil, err
	}
	sort.Slice(mappings.Items, func(i, j int) bool { return mappings.Items[i].Name < mappings.Items[j].Name })
	seen := map[string]bool{b.Namespace: true}
	deployed := newMappedDeployments(ctx, r, objs, b)
	for i := range mappings.Items {
		nsel, err := mappedNamespaces(&mappings.Items[i], b, deployed.atRisk)
		if err != nil {
			return nil, err
		}
		if nsel == nil {
			continue
		}
		nsList := &corev1.NamespaceList{}
		if err := r.List(ctx, nsList, client.MatchingLabelsSelector{Selector: nsel}); err != nil {
			return nil, err
		}
		for _, ns := range nsList.Items {
			if !seen[ns.Name] {
				seen[ns.Name] = true
				out = append(out, ns.Name)
			}
		}
	}
	return out, nil
}

// existingDeployments maps cluster namespace → the bundle's deployment there.
// The objects are the cache's own (not copied): callers only read them and
// deep-copy the one they modify.
func (r *Reconciler) existingDeployments(ctx context.Context, b *fleet.Bundle) (map[string]*fleet.BundleDeployment, error) {
	bds, err := r.objs.DeploymentsOf(b.Namespace + "/" + b.Name)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*fleet.BundleDeployment, len(bds))
	for _, bd := range bds {
		if bd.DeletionTimestamp == nil {
			out[bd.Namespace] = bd
		}
	}
	return out, nil
}

// ensureContent creates the Content named manifestID unless the cache
// (metadata only: payloads are not cached) already has it.
func (r *Reconciler) ensureContent(ctx context.Context, m *manifest.Manifest, id, sum string) error {
	meta := kubeclient.MetadataOf(fleet.GroupVersion.WithKind("Content"))
	err := r.Get(ctx, types.NamespacedName{Name: id}, meta)
	if err == nil && meta.DeletionTimestamp == nil {
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	data, err := m.Compressed()
	if err != nil {
		return err
	}
	c := &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: id}, Content: data, SHA256Sum: sum}
	if err := r.Create(ctx, c); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Content %s: %w", id, err)
	}
	log.FromContext(ctx).V(1).Info("created content", "content", id)
	return nil
}

// patchStatus writes the status only when it changed, as a merge patch
// against the cached status under its resourceVersion (a conflict, when
// the cache lags, is retried a second later).
//
// A write that fails may still have been applied (the connection broke
// after the API server took it, as when it shuts down). Then neither the
// cache nor "it did not change" can be trusted: a later reconcile could
// compute the right status, find it equal to the stale cache and write
// nothing, and a Bundle's own status changes do not trigger a reconcile.
// So after a failed write the next one replaces the whole status, guarded
// by the cached resourceVersion: a stale cache gets a conflict and a retry
// instead of a patch against the wrong base.
//
// While a rollout only progresses (progressOnly), writes are at least
// StatusInterval apart: a change within it is not written, and the
// returned delay says when to reconcile again to write it.
func (r *Reconciler) patchStatus(ctx context.Context, b *fleet.Bundle, old *fleet.BundleStatus) (time.Duration, error) {
	key := client.ObjectKeyFromObject(b)
	_, unsure := r.statusUnsure.Load(key)
	if !unsure && equality.Semantic.DeepEqual(*old, b.Status) {
		return 0, nil
	}
	if last, ok := r.statusWritten.Load(key); ok && !unsure && progressOnly(old, &b.Status) {
		if wait := r.Opts.StatusInterval - time.Since(last.(time.Time)); wait > 0 {
			return wait, nil
		}
	}
	var err error
	if unsure {
		err = r.Status().Update(ctx, b)
	} else {
		// Under the cached resourceVersion: a merge patch carries only
		// what differs from the cached status, so against a cache that
		// lags behind (our own last write, or writes the informer missed
		// while the API server restarted) it would leave fields of the
		// newer stored status in place. A stale cache gets a conflict
		// and a retry instead.
		base := b.DeepCopy()
		base.Status = *old
		err = r.Status().Patch(ctx, b, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	if apierrors.IsConflict(err) {
		// Nothing was written: try again once the cache has caught up.
		return jitter(time.Second), nil
	}
	if apierrors.IsNotFound(err) {
		// The Bundle is gone: nothing was written, and a write time
		// stored now would only be dropped again if a NotFound reconcile
		// followed, which nothing guarantees.
		r.statusUnsure.Delete(key)
		r.statusWritten.Delete(key)
		return 0, nil
	}
	if err != nil {
		r.statusUnsure.Store(key, true)
		return 0, fmt.Errorf("writing Bundle status: %w", err)
	}
	r.statusUnsure.Delete(key)
	r.statusWritten.Store(key, time.Now())
	return 0, nil
}
