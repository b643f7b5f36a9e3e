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
	"github.com/fleetgo/fleet/internal/target"
)

// Cache field indexes shared by the targeting controllers (bundle, content,
// clusterstatus). They let every reconcile read exactly the objects it needs
// from the informer cache instead of listing against the API server.
const (
	// IndexClusterNamespace maps a Cluster to its status.namespace when
	// that is the cluster's own (target.ClusterNamespace).
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
	if err := idx.IndexField(ctx, &fleet.BundleDeployment{}, IndexBDDownstream, func(o client.Object) []string {
		return DownstreamKeysOf(o.(*fleet.BundleDeployment))
	}); err != nil {
		return fmt.Errorf("indexing bundledeployments by downstream resources: %w", err)
	}
	if err := idx.IndexField(ctx, &fleet.Cluster{}, IndexClusterNamespace, func(o client.Object) []string {
		// Only the namespace the manager gives the cluster: its agent may
		// patch the status, and must not become "the cluster" of another
		// cluster's namespace (its schedule, its content grant).
		c := o.(*fleet.Cluster)
		if ns := c.Status.Namespace; ns != "" && ns == target.ClusterNamespace(c.Namespace, c.Name) {
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

// Informer indexes (keys without controller-runtime's namespace prefixes,
// which a field index adds twice per object) of BundleDeployments.
const (
	bdByBundle  = "fleet:bd-bundle"
	bdByContent = "fleet:bd-content"
)

// CachedObjects reads the informer stores directly. A client List copies
// every object it returns into the list's Items, even with
// UnsafeDisableDeepCopy: for a bundle with 10,000 targets that was 10,000
// BundleDeployments and 10,000 Clusters copied on every pass (a quarter of
// the manager's allocations at 10,000 clusters), and the same again for
// every reference count of a Content. The pointers returned here are the
// cache's own and must never be modified.
type CachedObjects struct {
	bds      toolscache.Indexer
	clusters toolscache.Indexer
}

var (
	cachedMu   sync.Mutex
	cachedDone = map[cache.Cache]*CachedObjects{}
)

// NewCachedObjects adds its indexes to the informers of c, once per cache:
// the bundle and content controllers share them.
func NewCachedObjects(ctx context.Context, c cache.Cache) (*CachedObjects, error) {
	cachedMu.Lock()
	defer cachedMu.Unlock()
	if co := cachedDone[c]; co != nil {
		return co, nil
	}
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
		return nil, fmt.Errorf("the manager's cache does not expose informer stores (%T)", bdInf)
	}
	if err := bdSII.AddIndexers(toolscache.Indexers{
		bdByBundle: func(o any) ([]string, error) {
			if obj, ok := o.(client.Object); ok {
				if k := BundleKeyOf(obj); k != "" {
					return []string{k}, nil
				}
			}
			return nil, nil
		},
		bdByContent: func(o any) ([]string, error) {
			if bd, ok := o.(*fleet.BundleDeployment); ok {
				return ContentsOf(bd), nil
			}
			return nil, nil
		},
	}); err != nil {
		return nil, fmt.Errorf("indexing bundledeployments: %w", err)
	}
	if _, ok := clSII.GetIndexer().GetIndexers()[toolscache.NamespaceIndex]; !ok {
		return nil, fmt.Errorf("the manager's Cluster informer has no namespace index")
	}
	co := &CachedObjects{bds: bdSII.GetIndexer(), clusters: clSII.GetIndexer()}
	cachedDone[c] = co
	return co, nil
}

// DeploymentsOf returns the cached BundleDeployments of a bundle
// ("<namespace>/<name>").
func (co *CachedObjects) DeploymentsOf(bundleKey string) ([]*fleet.BundleDeployment, error) {
	return byIndex[*fleet.BundleDeployment](co.bds, bdByBundle, bundleKey)
}

// DeploymentsUsing returns the cached BundleDeployments whose current or
// staged version (or content-name label) needs the Content.
func (co *CachedObjects) DeploymentsUsing(content string) ([]*fleet.BundleDeployment, error) {
	return byIndex[*fleet.BundleDeployment](co.bds, bdByContent, content)
}

// ClustersIn returns the cached Clusters of a namespace.
func (co *CachedObjects) ClustersIn(ns string) ([]*fleet.Cluster, error) {
	return byIndex[*fleet.Cluster](co.clusters, toolscache.NamespaceIndex, ns)
}

func byIndex[T any](idx toolscache.Indexer, name, key string) ([]T, error) {
	items, err := idx.ByIndex(name, key)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(items))
	for _, it := range items {
		if o, ok := it.(T); ok {
			out = append(out, o)
		}
	}
	return out, nil
}
