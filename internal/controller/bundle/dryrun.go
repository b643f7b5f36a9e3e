package bundle

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/target"
)

// Preview is what a reconcile of a Bundle would do, computed without
// writing anything (`fleet target`).
type Preview struct {
	ManifestID string
	// Plans are the targets that can be deployed, with their deployments
	// as the rollout would leave them.
	Plans []*target.Plan
	// Failed are targets whose options could not be computed, as the
	// Bundle's status would report them.
	Failed []*target.Target
	// Pending are failed targets of clusters registration has not
	// processed yet, which the Bundle's status leaves out (target.Pending).
	Pending []*target.Target
	Rollout *target.Result
	// Existing maps cluster namespace → current deployment.
	Existing map[string]*fleet.BundleDeployment
	// Orphans are deployments that would be deleted.
	Orphans []*fleet.BundleDeployment
}

// PreviewBundle runs the targeting and rollout logic of the reconciler
// against r (a live client or a cache) without writing.
func PreviewBundle(ctx context.Context, r client.Reader, b *fleet.Bundle) (*Preview, error) {
	if err := bundleNameError(b.Name); err != nil {
		return nil, err
	}
	m, err := manifest.New(b.Spec.Resources)
	if err != nil {
		return nil, fmt.Errorf("reading resources: %w", err)
	}
	id, err := m.ID()
	if err != nil {
		return nil, err
	}
	if b.Spec.ContentsID != "" {
		id = b.Spec.ContentsID
	}
	// As the reconciler does: the Helm values may be in the values Secret.
	b, err = withValues(ctx, r, b)
	if err != nil {
		return nil, err
	}
	in, err := TargetInput(ctx, r, b, id)
	if err != nil {
		return nil, err
	}
	targets, err := computeTargets(ctx, r, in)
	if err != nil {
		return nil, err
	}
	bds := &fleet.BundleDeploymentList{}
	if err := r.List(ctx, bds, client.MatchingLabels{fleet.BundleLabel: b.Name, fleet.BundleNamespaceLabel: b.Namespace}); err != nil {
		return nil, err
	}
	p := &Preview{ManifestID: id, Existing: map[string]*fleet.BundleDeployment{}}
	for i := range bds.Items {
		p.Existing[bds.Items[i].Namespace] = &bds.Items[i]
	}
	keep := map[string]bool{}
	for _, t := range targets {
		if keeps(t, p.Existing[t.Cluster.Status.Namespace]) {
			keep[t.Cluster.Status.Namespace] = true
		}
		if t.Err != nil {
			if t.Pending {
				p.Pending = append(p.Pending, t)
			} else {
				p.Failed = append(p.Failed, t)
			}
			continue
		}
		plan := &target.Plan{Target: t}
		if bd := p.Existing[t.Cluster.Status.Namespace]; bd != nil {
			plan.Deployment = bd.DeepCopy()
		}
		p.Plans = append(p.Plans, plan)
	}
	for ns, bd := range p.Existing {
		if !keep[ns] {
			p.Orphans = append(p.Orphans, bd)
		}
	}
	p.Rollout, err = target.Rollout(b, p.Plans, func(t *target.Target) *fleet.BundleDeployment {
		return &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Namespace: t.Cluster.Status.Namespace}}
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}
