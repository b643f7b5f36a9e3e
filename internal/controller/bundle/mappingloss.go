package bundle

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// mappedDeployments answers, for a BundleNamespaceMapping that cannot be
// evaluated, whether skipping it could delete one of the bundle's
// deployments: whether the bundle has a deployment for a Cluster of a
// workspace (its fleet.cattle.io/cluster-namespace label) other than its
// own that the mapping could have brought in. Only then is the bundle
// stalled; a bundle that deploys to no such cluster has nothing to lose.
// The bundle's deployments are read once (from the cache in the
// controller) and each distinct workspace's Namespace at most once per
// pass, only when a broken mapping asks: a healthy pass pays nothing.
type mappedDeployments struct {
	ctx  context.Context
	r    client.Reader
	objs *CachedObjects
	b    *fleet.Bundle

	loaded bool
	// workspaces: those of the bundle's deployments other than its own
	// namespace, sorted; "" for a deployment without the label (its
	// cluster is unknown, so it counts as possibly mapped).
	workspaces []string
	nsLabels   map[string]labels.Set
}

func newMappedDeployments(ctx context.Context, r client.Reader, objs *CachedObjects, b *fleet.Bundle) *mappedDeployments {
	return &mappedDeployments{ctx: ctx, r: r, objs: objs, b: b, nsLabels: map[string]labels.Set{}}
}

// atRisk reports whether a deployment of the bundle belongs to a Cluster
// of a namespace sel selects other than the bundle's; a nil sel (the
// namespaceSelector is unknown too) stands for any namespace.
func (m *mappedDeployments) atRisk(sel labels.Selector) (bool, error) {
	if err := m.load(); err != nil {
		return false, err
	}
	for _, ws := range m.workspaces {
		if ws == "" || sel == nil {
			return true, nil
		}
		set, err := m.labelsOf(ws)
		if err != nil {
			return false, err
		}
		if set != nil && sel.Matches(set) {
			return true, nil
		}
	}
	return false, nil
}

func (m *mappedDeployments) load() error {
	if m.loaded {
		return nil
	}
	var bds []*fleet.BundleDeployment
	if m.objs != nil {
		cached, err := m.objs.DeploymentsOf(m.b.Namespace + "/" + m.b.Name)
		if err != nil {
			return err
		}
		bds = cached
	} else {
		list := &fleet.BundleDeploymentList{}
		if err := m.r.List(m.ctx, list, client.MatchingLabels{fleet.BundleLabel: m.b.Name, fleet.BundleNamespaceLabel: m.b.Namespace},
			client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		bds = pointers(list.Items)
	}
	seen := map[string]bool{}
	for _, bd := range bds {
		ws := bd.Labels[fleet.ClusterNamespaceLabel]
		if ws == m.b.Namespace || bd.DeletionTimestamp != nil {
			continue
		}
		if !seen[ws] {
			seen[ws] = true
			m.workspaces = append(m.workspaces, ws)
		}
	}
	sort.Strings(m.workspaces)
	m.loaded = true
	return nil
}

// labelsOf returns a workspace's labels, nil when it is gone (its
// clusters, and so what they run, are gone with it).
func (m *mappedDeployments) labelsOf(ws string) (labels.Set, error) {
	if set, ok := m.nsLabels[ws]; ok {
		return set, nil
	}
	ns := &corev1.Namespace{}
	err := m.r.Get(m.ctx, types.NamespacedName{Name: ws}, ns)
	var set labels.Set
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, err
	default:
		set = labels.Set(ns.Labels)
		if set == nil {
			set = labels.Set{}
		}
	}
	m.nsLabels[ws] = set
	return set, nil
}
