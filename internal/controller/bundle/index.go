package bundle

import (
	"context"
	"fmt"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
)

// Cache field indexes shared by the targeting controllers (bundle, content,
// clusterstatus). They let every reconcile read exactly the objects it needs
// from the informer cache instead of listing against the API server.
const (
	// IndexBDBundle maps a BundleDeployment to "<bundle-namespace>/<bundle-name>".
	IndexBDBundle = "targeting.bd.bundle"
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
	if err := idx.IndexField(ctx, &fleet.BundleDeployment{}, IndexBDBundle, func(o client.Object) []string {
		if k := BundleKeyOf(o); k != "" {
			return []string{k}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing bundledeployments by bundle: %w", err)
	}
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
