// Package bundle is the Bundle reconciler: it computes a Bundle's targets
// from the informer cache, stores the Bundle's manifest as a Content, writes
// one BundleDeployment per target cluster (with its Helm values in a Secret),
// rolls new versions out within the rollout strategy and summarises the
// result on the Bundle status.
package bundle

import (
	"context"
	"maps"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/kubeclient"
	"github.com/fleetgo/fleet/internal/policy"
	"github.com/fleetgo/fleet/internal/target"
)

// Options configure the Bundle reconciler.
type Options struct {
	// Workers is the number of concurrent reconciles (default 10).
	Workers int
	// Coalesce delays reconciles caused by BundleDeployment status changes
	// so that a burst of agent reports gives one Bundle status write
	// (default 1s).
	Coalesce time.Duration
	// StatusInterval is the least time between two status writes of one
	// Bundle while only the progress of a rollout changes (counts and
	// messages; a new state or condition is written at once). A status
	// write stores the whole Bundle, resources included, again (default
	// 5s).
	StatusInterval time.Duration
	// ShardID, when set, limits the reconciler to Bundles labelled with it.
	ShardID string
	// ParallelWrites bounds how many of one Bundle's BundleDeployments
	// (each with its values Secret and Content grant) are written at once
	// (default 32). A rollout to N clusters then takes about N/ParallelWrites
	// API round trips instead of N.
	ParallelWrites int
	// ContentRBAC grants each cluster's agent the Contents of a deployment
	// (ClusterRole fleet-content-<namespace>) before writing it: for a
	// manager without the content API. Off, agents read Contents through
	// the content API and a rollout writes nothing but the deployments.
	ContentRBAC bool
	// Published, when set, learns the Contents of every deployment this
	// reconciler writes, for the content API of the same process (see
	// contentapi.Published).
	Published *contentapi.Published
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
	if o.Coalesce <= 0 {
		o.Coalesce = time.Second
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = 5 * time.Second
	}
	if o.ParallelWrites <= 0 {
		o.ParallelWrites = DefaultParallelWrites
	}
}

// DefaultParallelWrites is the default of Options.ParallelWrites: enough
// in flight to hide API round trips, few enough not to starve the agents'
// own requests on a small API server.
const DefaultParallelWrites = 32

// Reconciler reconciles Bundles.
type Reconciler struct {
	client.Client
	// APIReader reads what is deliberately not cached (values Secrets).
	APIReader client.Reader
	Opts      Options

	// written maps a BundleDeployment's key to the generation of this
	// reconciler's last write of it, until the cache shows that generation
	// (see cacheBehind).
	written sync.Map
	// objs reads the informer stores without copying.
	objs *CachedObjects
	// largePasses bounds concurrent passes over many clusters (largePass).
	largePasses chan struct{}
	// statusUnsure holds the Bundles whose last status write failed, so
	// may or may not have been applied (see patchStatus).
	statusUnsure sync.Map
	// statusWritten holds when each Bundle's status was last written.
	statusWritten sync.Map
	// grants batches the Content grants of concurrent reconciles per
	// cluster namespace (see grantBatcher).
	grants grantBatcher
	// values maps a Bundle's key to its values Secret as last read
	// (*valuesEntry, see bundleWithValues).
	values sync.Map
	// Recorder writes Events about Bundles (nil: none).
	Recorder events.EventRecorder
	// invalidReported maps a Bundle's key to the message of the
	// InvalidName Event last recorded for it (see reportInvalidName).
	invalidReported sync.Map
}

// Setup registers the indexes and the Bundle reconciler with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opts.defaults()
	if err := SetupIndexes(ctx, mgr); err != nil {
		return err
	}
	objs, err := NewCachedObjects(ctx, mgr.GetCache())
	if err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Opts: opts, objs: objs, largePasses: make(chan struct{}, maxLargePasses),
		Recorder: mgr.GetEventRecorder("fleet-controller")}
	return r.SetupWithManager(mgr)
}

// SetupWithManager wires the watches. Every watch maps to the few Bundles an
// event can affect; status-only churn of BundleDeployments is coalesced.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	bundlePreds := predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, deletionPredicate())
	if r.Opts.ShardID != "" {
		bundlePreds = predicate.And[client.Object](bundlePreds, shardPredicate(r.Opts.ShardID))
	}
	content := kubeclient.MetadataOf(fleet.GroupVersion.WithKind("Content"))
	// downstreamResources sources: metadata only (payloads are read with
	// a GET when a bundle that copies them reconciles).
	secret := kubeclient.MetadataOf(corev1.SchemeGroupVersion.WithKind("Secret"))
	configMap := kubeclient.MetadataOf(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	b := ctrl.NewControllerManagedBy(mgr).
		Named("bundle").
		For(&fleet.Bundle{}, builder.WithPredicates(bundlePreds)).
		Watches(&fleet.BundleDeployment{}, r.deploymentHandler()).
		Watches(&fleet.Cluster{}, r.clusterHandler()).
		Watches(&fleet.ClusterGroup{}, r.namespaceWideHandler(func(o client.Object) string { return o.GetNamespace() }),
			builder.WithPredicates(clusterGroupTargetingChanged())).
		Watches(&fleet.GitRepoRestriction{}, r.namespaceWideHandler(func(o client.Object) string { return o.GetNamespace() })).
		Watches(&fleet.BundleNamespaceMapping{}, r.namespaceWideHandler(func(o client.Object) string { return o.GetNamespace() })).
		Watches(&corev1.Namespace{}, r.namespaceLabelHandler()).
		WatchesMetadata(content, r.contentHandler(), builder.WithPredicates(deleteOnly())).
		WatchesMetadata(secret, r.downstreamSourceHandler("secret")).
		WatchesMetadata(configMap, r.downstreamSourceHandler("configmap")).
		WatchesMetadata(secret, r.valuesSecretHandler())
	c, err := b.WithOptions(controller.Options{MaxConcurrentReconciles: r.Opts.Workers}).
		Build(r)
	if err != nil {
		return err
	}
	return policy.Watch(mgr, r.Opts.Policies, c, r.namespaceWideHandler(func(o client.Object) string { return o.GetNamespace() }))
}

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

func req(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

func reqForKey(key string) (reconcile.Request, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return req(key[:i], key[i+1:]), true
		}
	}
	return reconcile.Request{}, false
}

// deploymentHandler enqueues a BundleDeployment's Bundle after the coalesce
// delay: the work queue deduplicates, so one burst gives one reconcile.
func (r *Reconciler) deploymentHandler() handler.EventHandler {
	enqueue := func(o client.Object, q queue) {
		if rq, ok := reqForKey(BundleKeyOf(o)); ok {
			q.AddAfter(rq, r.Opts.Coalesce)
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) { enqueue(e.Object, q) },
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) { enqueue(e.ObjectNew, q) },
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) { enqueue(e.Object, q) },
	}
}

// clusterTargetingChanged reports whether a Cluster change can change which
// bundles target it or with which options; heartbeats (lastSeen) and status
// written by the targeting controllers do not. Of the Schedule status only
// a change of OffSchedule counts: the deployments copy nothing else of it.
func clusterTargetingChanged(o, n *fleet.Cluster) bool {
	return !maps.Equal(o.Labels, n.Labels) ||
		!maps.Equal(o.Annotations, n.Annotations) ||
		o.Spec.Paused != n.Spec.Paused ||
		OffSchedule(o) != OffSchedule(n) ||
		!reflect.DeepEqual(o.Spec.TemplateValues, n.Spec.TemplateValues) ||
		o.Status.Namespace != n.Status.Namespace ||
		IsOffline(o) != IsOffline(n) ||
		registered(o) != registered(n) ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
}

// registered reports whether registration has processed the cluster: a
// cluster without status.namespace is reported on its bundles only then
// (target.Target.Pending).
func registered(c *fleet.Cluster) bool {
	return meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionProcessed) != nil
}

// OffSchedule reports whether a Schedule covers the cluster (the schedule
// controller sets status.scheduled) while none of its windows is open
// (status.activeSchedule): the cluster's BundleDeployments then carry
// spec.offSchedule and its agent leaves them as they are, as in Fleet.
func OffSchedule(c *fleet.Cluster) bool {
	return c.Status.Scheduled && !c.Status.ActiveSchedule
}

// IsOffline reports the Offline condition the clusterstatus controller
// maintains.
func IsOffline(c *fleet.Cluster) bool {
	return meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConditionOffline)
}

// clusterHandler enqueues only the bundles that can see the cluster (its
// namespace plus namespaces mapped to it) and whose targets could match the
// cluster before or after the change, or that already deploy to it.
func (r *Reconciler) clusterHandler() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) {
			r.enqueueForCluster(ctx, q, e.Object.(*fleet.Cluster))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			o, n := e.ObjectOld.(*fleet.Cluster), e.ObjectNew.(*fleet.Cluster)
			if clusterTargetingChanged(o, n) {
				r.enqueueForCluster(ctx, q, o, n)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			if c, ok := e.Object.(*fleet.Cluster); ok {
				r.enqueueForCluster(ctx, q, c)
			}
		},
	}
}

func (r *Reconciler) enqueueForCluster(ctx context.Context, q queue, versions ...*fleet.Cluster) {
	c := versions[len(versions)-1]
	groups := &fleet.ClusterGroupList{}
	// Cluster events fire for every cluster of an outage (the Offline flip),
	// so the lists here read the cache's objects without deep copies: the
	// groups and bundles are only matched against (GroupsOf, NewBundleMatcher
	// and MatchAny read them), never modified.
	if err := r.List(ctx, groups, client.InNamespace(c.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	gs := make([]*fleet.ClusterGroup, len(groups.Items))
	for i := range groups.Items {
		gs[i] = &groups.Items[i]
	}
	infos := make([]target.ClusterInfo, 0, len(versions))
	for _, v := range versions {
		infos = append(infos, target.NewClusterInfo(v, gs))
	}
	// Bundles that already deploy to the cluster must see it go. Their
	// deployments are in the namespace the manager computes, not in
	// status.namespace: the agent may write that field, and must not
	// have the Bundles of another cluster's namespace re-evaluated.
	deployed := map[string]bool{}
	bds := &fleet.BundleDeploymentList{}
	if err := r.List(ctx, bds, client.InNamespace(target.ClusterNamespace(c.Namespace, c.Name)), client.UnsafeDisableDeepCopy); err == nil {
		for i := range bds.Items {
			k := BundleKeyOf(&bds.Items[i])
			if rq, ok := reqForKey(k); ok && !deployed[k] {
				deployed[k] = true
				q.Add(rq)
			}
		}
	}
	for _, ns := range r.namespacesSeeing(ctx, c.Namespace) {
		bundles := &fleet.BundleList{}
		if err := r.List(ctx, bundles, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			continue
		}
		for i := range bundles.Items {
			b := &bundles.Items[i]
			if deployed[b.Namespace+"/"+b.Name] {
				continue
			}
			bm, err := target.NewBundleMatcher(b)
			if err != nil {
				continue
			}
			for _, ci := range infos {
				if bm.MatchAny(ci) {
					q.Add(req(b.Namespace, b.Name))
					break
				}
			}
		}
	}
}

// namespacesSeeing returns the namespaces whose bundles can target clusters
// of clusterNS: clusterNS itself and the namespaces of mappings selecting it.
func (r *Reconciler) namespacesSeeing(ctx context.Context, clusterNS string) []string {
	out := []string{clusterNS}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: clusterNS}, ns); err != nil {
		return out
	}
	mappings := &fleet.BundleNamespaceMappingList{}
	// Runs on every cluster event; the mappings' selectors are only read.
	if err := r.List(ctx, mappings, client.UnsafeDisableDeepCopy); err != nil {
		return out
	}
	seen := map[string]bool{clusterNS: true}
	for _, m := range mappings.Items {
		if seen[m.Namespace] || m.NamespaceSelector == nil || m.BundleSelector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(m.NamespaceSelector)
		if err == nil && sel.Matches(labels.Set(ns.Labels)) {
			seen[m.Namespace] = true
			out = append(out, m.Namespace)
		}
	}
	return out
}

// namespaceWideHandler enqueues every bundle of the object's namespace and
// of namespaces that map to it (ClusterGroups, restrictions and mappings
// can change any of them).
func (r *Reconciler) namespaceWideHandler(nsOf func(client.Object) string) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var out []reconcile.Request
		for _, ns := range r.namespacesSeeing(ctx, nsOf(o)) {
			bundles := &fleet.BundleList{}
			// Only names are read: no deep copy of every bundle's spec.
			if err := r.List(ctx, bundles, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
				continue
			}
			for i := range bundles.Items {
				out = append(out, req(bundles.Items[i].Namespace, bundles.Items[i].Name))
			}
		}
		return out
	})
}

// namespaceLabelHandler re-evaluates bundles of mappings whose namespace
// selector matched a namespace before or after its labels changed.
func (r *Reconciler) namespaceLabelHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, q queue, lbls ...map[string]string) {
		mappings := &fleet.BundleNamespaceMappingList{}
		if err := r.List(ctx, mappings); err != nil || len(mappings.Items) == 0 {
			return
		}
		for _, m := range mappings.Items {
			if m.NamespaceSelector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(m.NamespaceSelector)
			if err != nil {
				continue
			}
			for _, l := range lbls {
				if sel.Matches(labels.Set(l)) {
					bundles := &fleet.BundleList{}
					// Only names are read: no deep copy of every bundle's spec.
					if err := r.List(ctx, bundles, client.InNamespace(m.Namespace), client.UnsafeDisableDeepCopy); err == nil {
						for i := range bundles.Items {
							q.Add(req(bundles.Items[i].Namespace, bundles.Items[i].Name))
						}
					}
					break
				}
			}
		}
	}
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			if !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) {
				enqueue(ctx, q, e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
			}
		},
	}
}

// contentHandler re-creates a deleted Content that is still needed by
// enqueueing the bundles whose deployments reference it.
func (r *Reconciler) contentHandler() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		bds, err := r.objs.DeploymentsUsing(o.GetName())
		if err != nil {
			return nil
		}
		seen := map[string]bool{}
		var out []reconcile.Request
		for _, bd := range bds {
			k := BundleKeyOf(bd)
			if rq, ok := reqForKey(k); ok && !seen[k] {
				seen[k] = true
				out = append(out, rq)
			}
		}
		return out
	})
}

func deletionPredicate() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return (e.ObjectOld.GetDeletionTimestamp() == nil) != (e.ObjectNew.GetDeletionTimestamp() == nil)
	}}
}

// clusterGroupTargetingChanged passes the ClusterGroup events that can
// change targeting: create, delete, a new selector (the spec bumps the
// generation; status writes, a subresource, do not) and new labels (matched
// by clusterGroupSelector). The clusterstatus controller rewrites a group's
// status about once a second during a rollout, and each write used to send
// every bundle of the namespace through a full targeting pass.
func clusterGroupTargetingChanged() predicate.Predicate {
	return predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, deletionPredicate())
}

func deleteOnly() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
	}
}

func shardPredicate(shard string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[fleet.ShardLabel] == shard })
}
