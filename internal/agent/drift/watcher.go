package drift

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
)

// Watcher keeps one label-selected dynamic informer per kind of deployed
// object (only objects carrying the agent's object-set label are cached, not
// every object of that kind) and tells the owner BundleDeployment when one
// of its objects changes or disappears. Informers of kinds no deployment
// uses any more are stopped.
//
// Objects whose kind is not served (see pending) are retried in the
// background until their CRD is, so that they are followed without a
// redeploy.
type Watcher struct {
	dyn      dynamic.Interface
	mapper   meta.RESTMapper
	selector string
	notify   func(types.NamespacedName)

	mu        sync.Mutex
	ctx       context.Context
	informers map[schema.GroupVersionResource]*watched
	owners    map[objKey]map[types.NamespacedName]bool
	byBD      map[types.NamespacedName][]objKey
	// pending are the objects of each deployment that are not followed:
	// their kind does not map, or the API server said it does not serve
	// their resource. The retry loop follows them once it does.
	pending map[types.NamespacedName]*pendingObjs

	// wake asks the retry loop to schedule an attempt; resetBackoff, set
	// by Watch, makes that attempt the first of a new backoff.
	wake         chan struct{}
	resetBackoff atomic.Bool
}

type watched struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	users    int
	gvr      schema.GroupVersionResource
	kind     schema.GroupVersionKind
	// gone is set when a LIST of the resource was answered 404: its CRD
	// was deleted (or the cached mapping was stale). The informer is then
	// stopped, and Watch stops waiting for it to sync.
	gone atomic.Bool
}

type objKey struct {
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// Config is the downstream cluster.
	Config *rest.Config
	// Label selects the objects to follow (only objects carrying it are
	// cached).
	Label string
	// Notify is called with the BundleDeployment owning a changed object.
	Notify func(types.NamespacedName)
	// Mapper maps kinds to resources; nil builds a discovery-backed one.
	// The agent passes the deployer's shared one (refreshed on a miss), so
	// the process keeps one copy of the cluster's API surface.
	Mapper meta.RESTMapper
}

// NewWatcher watches objects of o.Config that carry o.Label.
func NewWatcher(ctx context.Context, o WatcherOptions) (*Watcher, error) {
	dyn, err := dynamic.NewForConfig(o.Config)
	if err != nil {
		return nil, err
	}
	mapper := o.Mapper
	if mapper == nil {
		dc, err := discovery.NewDiscoveryClientForConfig(o.Config)
		if err != nil {
			return nil, err
		}
		mapper = &resettingMapper{DeferredDiscoveryRESTMapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
	}
	w := &Watcher{
		dyn:       dyn,
		mapper:    mapper,
		selector:  o.Label,
		notify:    o.Notify,
		ctx:       ctx,
		informers: map[schema.GroupVersionResource]*watched{},
		owners:    map[objKey]map[types.NamespacedName]bool{},
		byBD:      map[types.NamespacedName][]objKey{},
		pending:   map[types.NamespacedName]*pendingObjs{},
		wake:      make(chan struct{}, 1),
	}
	go w.retryLoop()
	return w, nil
}

// resettingMapper refreshes its discovery when a kind is unknown (a CRD of
// the bundle may have just been created).
type resettingMapper struct {
	*restmapper.DeferredDiscoveryRESTMapper
}

func (m *resettingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	r, err := m.DeferredDiscoveryRESTMapper.RESTMapping(gk, versions...)
	if meta.IsNoMatchError(err) {
		m.Reset()
		r, err = m.DeferredDiscoveryRESTMapper.RESTMapping(gk, versions...)
	}
	return r, err
}

func (w *Watcher) mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	return w.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
}

func (w *Watcher) keyOf(o *unstructured.Unstructured) (objKey, error) {
	m, err := w.mapping(o.GroupVersionKind())
	if err != nil {
		return objKey{}, err
	}
	return keyFor(m, o.GetNamespace(), o.GetName()), nil
}

func keyFor(m *meta.RESTMapping, namespace, name string) objKey {
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		namespace = ""
	}
	return objKey{gvr: m.Resource, namespace: namespace, name: name}
}

// syncTimeout bounds how long Watch waits for a new informer's first LIST.
// An informer whose resource is not served stops the wait at once (see
// watched.gone).
const syncTimeout = 60 * time.Second

// Watch makes the watcher follow exactly objs for bd, and waits until the
// informers they need are synced. An object whose kind does not map (its
// CRD was deleted, and the objects with it, or is not created yet) or whose
// resource the API server does not serve although the cached discovery
// still maps it is not followed for now: Live reports it absent, the other
// objects are followed as usual, and the retry loop follows it once its
// CRD is served. Watch never waits for that.
func (w *Watcher) Watch(bd types.NamespacedName, objs []*unstructured.Unstructured) error {
	refs := make([]objRef, 0, len(objs))
	for _, o := range objs {
		refs = append(refs, objRef{gvk: o.GroupVersionKind(), namespace: o.GetNamespace(), name: o.GetName()})
	}
	found, unmapped, err := w.resolve(refs)
	if err != nil {
		return err
	}
	keys := make([]objKey, 0, len(found))
	w.mu.Lock()
	old := w.byBD[bd]
	toSync := map[*watched]bool{}
	for _, f := range found {
		keys = append(keys, f.key)
		w.ownLocked(f.key, bd)
		inf := w.informers[f.key.gvr]
		if inf == nil {
			inf = w.startLocked(f.key.gvr, f.kind)
		}
		inf.users++
		toSync[inf] = true
	}
	// Release the previous registration after taking the new one, so an
	// informer still needed is not restarted on every upgrade.
	w.byBD[bd] = old
	w.forgetLocked(bd)
	for _, k := range keys {
		w.ownLocked(k, bd)
	}
	w.byBD[bd] = keys
	if len(unmapped) > 0 {
		w.pending[bd] = &pendingObjs{refs: unmapped}
	}
	w.mu.Unlock()
	if len(unmapped) > 0 {
		w.retrySoon(true)
	}
	return w.waitSynced(toSync)
}

// waitSynced waits until every informer of infs has synced or found its
// resource gone.
func (w *Watcher) waitSynced(infs map[*watched]bool) error {
	if len(infs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(w.ctx, syncTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		for inf := range infs {
			if !inf.informer.HasSynced() && !inf.gone.Load() {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("drift watch: informers did not sync")
	}
	return nil
}

func (w *Watcher) ownLocked(k objKey, bd types.NamespacedName) {
	if w.owners[k] == nil {
		w.owners[k] = map[types.NamespacedName]bool{}
	}
	w.owners[k][bd] = true
}

// Watched is how many objects of bd are followed (zero once forgotten).
func (w *Watcher) Watched(bd types.NamespacedName) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byBD[bd])
}

// Forget stops following bd's objects.
func (w *Watcher) Forget(bd types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forgetLocked(bd)
}

func (w *Watcher) forgetLocked(bd types.NamespacedName) {
	for _, k := range w.byBD[bd] {
		if w.owners[k] == nil {
			w.owners[k] = map[types.NamespacedName]bool{}
		}
		delete(w.owners[k], bd)
		if len(w.owners[k]) == 0 {
			delete(w.owners, k)
		}
		if inf := w.informers[k.gvr]; inf != nil {
			inf.users--
			if inf.users <= 0 {
				inf.cancel()
				delete(w.informers, k.gvr)
			}
		}
	}
	delete(w.byBD, bd)
	delete(w.pending, bd)
}

func (w *Watcher) startLocked(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) *watched {
	ctx, cancel := context.WithCancel(w.ctx)
	inf := dynamicinformer.NewFilteredDynamicInformer(w.dyn, gvr, metav1.NamespaceAll, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = w.selector }).Informer()
	handler := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		w.changed(objKey{gvr: gvr, namespace: u.GetNamespace(), name: u.GetName()})
	}
	// Drift compares only the fields the chart sets; managedFields are
	// never read, so they are not kept in memory.
	_ = inf.SetTransform(stripManagedFields)
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handler,
		UpdateFunc: func(_, n any) { handler(n) },
		DeleteFunc: handler,
	})
	e := &watched{informer: inf, cancel: cancel, gvr: gvr, kind: kind}
	// A LIST answered 404: the resource is not served (any more). Without
	// this the reflector would retry in a backoff growing to 30-60 s, its
	// empty cache answering Live meanwhile, and Watch waiting for it.
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsNotFound(err) {
			w.resourceGone(e)
			return
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	go inf.Run(ctx.Done())
	w.informers[gvr] = e
	return e
}

func stripManagedFields(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
	}
	return obj, nil
}

func (w *Watcher) changed(k objKey) {
	w.mu.Lock()
	var bds []types.NamespacedName
	for bd := range w.owners[k] {
		bds = append(bds, bd)
	}
	w.mu.Unlock()
	for _, bd := range bds {
		w.notify(bd)
	}
}

// Live returns the live version of a desired object: from the informer when
// it is watched (no API call), else with a GET. Nil means it does not exist
// or lost the object-set label. An object whose kind does not map (even
// after the mapper refreshed its discovery) cannot exist either: its CRD
// is gone. Reporting it absent shows it missing; an error would stop the
// evaluation of every other object of the bundle and freeze its status.
func (w *Watcher) Live(ctx context.Context, desired *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	k, err := w.keyOf(desired)
	if meta.IsNoMatchError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	inf := w.informers[k.gvr]
	w.mu.Unlock()
	if inf != nil && inf.informer.HasSynced() {
		key := k.name
		if k.namespace != "" {
			key = k.namespace + "/" + k.name
		}
		obj, exists, err := inf.informer.GetStore().GetByKey(key)
		if err != nil || !exists {
			return nil, err
		}
		return obj.(*unstructured.Unstructured).DeepCopy(), nil
	}
	var u *unstructured.Unstructured
	if k.namespace != "" {
		u, err = w.dyn.Resource(k.gvr).Namespace(k.namespace).Get(ctx, k.name, metav1.GetOptions{})
	} else {
		u, err = w.dyn.Resource(k.gvr).Get(ctx, k.name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return u, err
}
