package statusview

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Load lists what the view needs from a manager cluster. namespace limits
// GitRepos, HelmOps, Bundles and Clusters to one workspace; "" means all. The
// BundleDeployments live in the cluster namespaces, so they are always
// listed cluster-wide and filtered by their bundle-namespace label.
func Load(ctx context.Context, c client.Reader, namespace string) (Fleet, error) {
	var (
		f     Fleet
		repos fleet.GitRepoList
		ops   fleet.HelmOpList
		bs    fleet.BundleList
		bds   fleet.BundleDeploymentList
		cls   fleet.ClusterList
	)
	in := []client.ListOption{}
	if namespace != "" {
		in = append(in, client.InNamespace(namespace))
	}
	if err := c.List(ctx, &repos, in...); err != nil {
		return f, fmt.Errorf("listing gitrepos: %w", err)
	}
	// A manager older than HelmOps has no such resource: show the rest.
	if err := c.List(ctx, &ops, in...); err != nil && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
		return f, fmt.Errorf("listing helmops: %w", err)
	}
	if err := c.List(ctx, &bs, in...); err != nil {
		return f, fmt.Errorf("listing bundles: %w", err)
	}
	if err := c.List(ctx, &cls, in...); err != nil {
		return f, fmt.Errorf("listing clusters: %w", err)
	}
	var bdOpts []client.ListOption
	if namespace != "" {
		bdOpts = append(bdOpts, client.MatchingLabels{fleet.BundleNamespaceLabel: namespace})
	}
	if err := c.List(ctx, &bds, bdOpts...); err != nil {
		return f, fmt.Errorf("listing bundledeployments: %w", err)
	}
	f.GitRepos, f.HelmOps, f.Bundles, f.BundleDeployments, f.Clusters = repos.Items, ops.Items, bs.Items, bds.Items, cls.Items
	return f, nil
}
