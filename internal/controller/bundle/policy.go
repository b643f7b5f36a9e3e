package bundle

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/policy"
	"github.com/fleetgo/fleet/internal/target"
)

// computeTargets is target.Compute under the Policies of the bundle's
// namespace, read from r (none when r is nil): a Bundle they refuse is a *target.BundleError (refused whole,
// nothing deployed is touched, not retried until the Bundle or a Policy
// changes), and with requireServiceAccount but not allowNamespaceCreation
// every target gets createNamespace=false, whatever the Bundle or its
// customizations say.
func computeTargets(ctx context.Context, r client.Reader, in target.Input) ([]*target.Target, error) {
	policies, err := policy.Read(ctx, r, in.Bundle.Namespace)
	if err != nil {
		return nil, err
	}
	if err := authorizeBundle(policies, in.Bundle); err != nil {
		return nil, err
	}
	targets, err := target.Compute(in)
	if err != nil {
		return nil, err
	}
	if policies.DisablesNamespaceCreation() {
		if err := noNamespaceCreation(targets, in.ManifestID); err != nil {
			return nil, err
		}
	}
	return targets, nil
}

// policyReader is where the reconciler reads Policies from: nil while the
// API server does not serve them (Options.Policies).
func (r *Reconciler) policyReader() client.Reader {
	if !r.Opts.Policies.Served() {
		return nil
	}
	return r.Client
}

// authorizeBundle checks the Bundle's service accounts as Rancher Fleet's
// Bundle reconciler does, without defaulting anything (the GitRepo and
// HelmOp controllers applied their defaults to the Bundles they wrote):
// the Bundle's own serviceAccount against requireServiceAccount and
// allowedServiceAccounts, and each target's non-empty one against
// allowedServiceAccounts.
func authorizeBundle(policies *target.PolicySet, b *fleet.Bundle) error {
	if policies.Empty() {
		return nil
	}
	if err := policies.CheckServiceAccount(b.Spec.ServiceAccount); err != nil {
		return &target.BundleError{Err: err}
	}
	for _, t := range b.Spec.Targets {
		if t.ServiceAccount == "" {
			continue
		}
		if err := policies.CheckServiceAccount(t.ServiceAccount); err != nil {
			return &target.BundleError{Err: fmt.Errorf("target %s: %w", t.Name, err)}
		}
	}
	return nil
}

// noNamespaceCreation sets createNamespace=false on every target that can
// be deployed and computes its deployment ID again, so that the agent sees
// the change. Targets with equal IDs have equal options, so each ID is
// computed once.
func noNamespaceCreation(targets []*target.Target, manifestID string) error {
	ids := map[string]string{}
	for _, t := range targets {
		if t.Err != nil || (t.Options.CreateNamespace != nil && !*t.Options.CreateNamespace) {
			continue
		}
		t.Options.CreateNamespace = ptr(false)
		if id, ok := ids[t.DeploymentID]; ok {
			t.DeploymentID = id
			continue
		}
		id, err := manifest.DeploymentID(manifestID, t.Options)
		if err != nil {
			return err
		}
		ids[t.DeploymentID], t.DeploymentID = id, id
	}
	return nil
}
