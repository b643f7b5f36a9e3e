package bundle

import (
	"context"
	"fmt"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
)

// Cache field indexes shared by the targeting controllers (bundle, content,
// clusterstatus). They let every reconcile read exactly the objects it needs
// from the informer cache instead of listing against the API server.
const (
	// IndexBDContent maps a BundleDeployment to the manifest IDs of its
	// current and staged deployment IDs (the Contents it needs).
	IndexBDContent = "targeting.bd.content"
	// IndexClusterNamespace maps a Cluster to its status.namespace.
	IndexClusterNamespace = "targeting.cluster.status.namespace"
)

var (
	indexMu   sync.Mutex
	indexDone = map[any]bool{}
)

// SetupIndexes registers the indexes once per manager; every targeting
// controller calls it so that each can be set up on its own.
func SetupIndexes(ctx context.Context, mgr manager.Manager) error {
	indexMu.Lock()
	defer indexMu.Unlock()
	key := mgr.GetFieldIndexer()
	if indexDone[key] {
		return nil
	}
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &fleet.BundleDeployment{}, IndexBDContent, func(o client.Object) []string {
		return ContentsOf(o.(*fleet.BundleDeployment))
	}); err != nil {
		return fmt.Errorf("indexing bundledeployments by content: %w", err)
	}
	if err := idx.IndexField(ctx, &fleet.BundleDeployment{}, IndexBDDownstream, func(o client.Object) []string {
		return DownstreamKeysOf(o.(*fleet.BundleDeployment))
	}); err != nil {
		return fmt.Errorf("indexing bundledeployments by downstream resources: %w", err)
	}
	if err := idx.IndexField(ctx, &fleet.Cluster{}, IndexClusterNamespace, func(o client.Object) []string {
		if ns := o.(*fleet.Cluster).Status.Namespace; ns != "" {
			return []string{ns}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing clusters by namespace: %w", err)
	}
	indexDone[key] = true
	return nil
}

// BundleKeyOf returns "<namespace>/<name>" of the bundle a BundleDeployment
// (or its values Secret) belongs to, from its labels.
func BundleKeyOf(o client.Object) string {
	l := o.GetLabels()
	if l[fleet.BundleLabel] == "" || l[fleet.BundleNamespaceLabel] == "" {
		return ""
	}
	return l[fleet.BundleNamespaceLabel] + "/" + l[fleet.BundleLabel]
}

// ContentsOf lists the Content names a BundleDeployment needs: those of its
// current and staged versions, plus its content-name label.
func ContentsOf(bd *fleet.BundleDeployment) []string {
	var out []string
	add := func(id string) {
		if id == "" {
			return
		}
		for _, x := range out {
			if x == id {
				return
			}
		}
		out = append(out, id)
	}
	add(manifest.ManifestIDOf(bd.Spec.DeploymentID))
	add(manifest.ManifestIDOf(bd.Spec.StagedDeploymentID))
	add(bd.Labels[fleet.ContentNameLabel])
	return out
}

// bdByBundle is an informer index (keys without controller-runtime's
// namespace prefixes) of BundleDeployments by BundleKeyOf.
const bdByBundle = "fleet:bd-bundle"

// cachedObjects reads the informer stores directly. A client List copies
// every object it returns into the list's Items, even with
// UnsafeDisableDeepCopy: for a bundle with 10,000 targets that was 10,000
// BundleDeployments and 10,000 Clusters copied on every pass (a quarter of
// the manager's allocations at 10,000 clusters). The pointers returned here
// are the cache's own and must never be modified.
type cachedObjects struct {
	bds      toolscache.Indexer
	clusters toolscache.Indexer
}

// newCachedObjects adds the index it needs to the informers of c. It
// returns nil (callers then List) when c's informers do not expose their
// stores.
func newCachedObjects(ctx context.Context, c cache.Cache) (*cachedObjects, error) {
	bdInf, err := c.GetInformer(ctx, &fleet.BundleDeployment{})
	if err != nil {
		return nil, err
	}
	clInf, err := c.GetInformer(ctx, &fleet.Cluster{})
	if err != nil {
		return nil, err
	}
	bdSII, ok1 := bdInf.(toolscache.SharedIndexInformer)
	clSII, ok2 := clInf.(toolscache.SharedIndexInformer)
	if !ok1 || !ok2 {
		return nil, nil
	}
	if _, exists := bdSII.GetIndexer().GetIndexers()[bdByBundle]; !exists {
		if err := bdSII.AddIndexers(toolscache.Indexers{bdByBundle: func(o any) ([]string, error) {
			if obj, ok := o.(client.Object); ok {
				if k := BundleKeyOf(obj); k != "" {
					return []string{k}, nil
				}
			}
			return nil, nil
		}}); err != nil {
			return nil, fmt.Errorf("indexing bundledeployments by bundle: %w", err)
		}
	}
	if _, exists := clSII.GetIndexer().GetIndexers()[toolscache.NamespaceIndex]; !exists {
		return nil, nil
	}
	return &cachedObjects{bds: bdSII.GetIndexer(), clusters: clSII.GetIndexer()}, nil
}

// deploymentsOf returns the cached BundleDeployments of a bundle.
func (co *cachedObjects) deploymentsOf(bundleKey string) ([]*fleet.BundleDeployment, error) {
	items, err := co.bds.ByIndex(bdByBundle, bundleKey)
	if err != nil {
		return nil, err
	}
	out := make([]*fleet.BundleDeployment, 0, len(items))
	for _, it := range items {
		if bd, ok := it.(*fleet.BundleDeployment); ok {
			out = append(out, bd)
		}
	}
	return out, nil
}

// clustersIn returns the cached Clusters of a namespace.
func (co *cachedObjects) clustersIn(ns string) ([]*fleet.Cluster, error) {
	items, err := co.clusters.ByIndex(toolscache.NamespaceIndex, ns)
	if err != nil {
		return nil, err
	}
	out := make([]*fleet.Cluster, 0, len(items))
	for _, it := range items {
		if c, ok := it.(*fleet.Cluster); ok {
			out = append(out, c)
		}
	}
	return out, nil
}
