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

// Read combines the Policies of namespace ns. A nil reader (the manager
// found no Policy CRD at start) and an API server that does not serve
// Policies (CRDs that predate them) both mean none, as in Rancher Fleet.
func Read(ctx context.Context, c client.Reader, ns string) (*target.PolicySet, error) {
	if c == nil {
		return target.CombinePolicies(nil), nil
	}
	var list fleet.PolicyList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		if meta.IsNoMatchError(err) {
			return target.CombinePolicies(nil), nil
		}
		return nil, fmt.Errorf("reading Policies: %w", err)
	}
	return target.CombinePolicies(list.Items), nil
}
