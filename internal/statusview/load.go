package statusview

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// Workspaces lists, sorted, the namespaces that hold GitRepos, HelmOps or
// Clusters, for a hint when the workspace asked for holds none. Only object
// metadata is listed, so that a large fleet costs little.
func Workspaces(ctx context.Context, c client.Reader) ([]string, error) {
	seen := map[string]bool{}
	for _, kind := range []string{"GitRepoList", "HelmOpList", "ClusterList"} {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(fleet.GroupVersion.WithKind(kind))
		if err := c.List(ctx, l); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("listing %s: %w", kind, err)
		}
		for i := range l.Items {
			seen[l.Items[i].Namespace] = true
		}
	}
	out := make([]string, 0, len(seen))
	for ns := range seen {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out, nil
}
