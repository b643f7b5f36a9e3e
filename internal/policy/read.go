// Package policy reads the Policies of a namespace for the controllers that
// enforce them (GitRepo, HelmOp, Bundle); the rules themselves are pure
// functions in internal/target (PolicySet).
package policy

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// Read combines the Policies of namespace ns (see List).
func Read(ctx context.Context, c client.Reader, ns string) (*target.PolicySet, error) {
	list, err := List(ctx, c, ns)
	if err != nil {
		return nil, fmt.Errorf("reading Policies: %w", err)
	}
	return target.CombinePolicies(list), nil
}

// List returns the Policies of namespace ns. A nil reader (the Policy
// gate is closed: the manager found no Policy CRD) and an API server that
// does not serve Policies (CRDs that predate them) both mean none, as in
// Rancher Fleet. Callers that need each Policy by name (to say which one
// names a Secret) use it instead of Read.
func List(ctx context.Context, c client.Reader, ns string) ([]fleet.Policy, error) {
	if c == nil {
		return nil, nil
	}
	var list fleet.PolicyList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, err
	}
	return list.Items, nil
}
