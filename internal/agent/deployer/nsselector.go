package deployer

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// CheckTargetNamespace enforces allowedTargetNamespaceSelector, which the
// manager copies from the GitRepoRestrictions of the bundle's namespace: the
// release namespace must already exist downstream and its labels must match.
// The namespace is read with the agent's own identity (the bundle's service
// account may not be allowed to read namespaces) and before namespaceLabels
// are applied, so a bundle cannot label its way in. Nil selector: no check.
//
// A missing or non-matching namespace is an ordinary error, retried with the
// agent's backoff: an operator may create or label the namespace later.
func (d *Deployer) CheckTargetNamespace(ctx context.Context, opts fleet.BundleDeploymentOptions) error {
	if opts.AllowedTargetNamespaceSelector == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(opts.AllowedTargetNamespaceSelector)
	if err != nil {
		return fmt.Errorf("%w: invalid allowedTargetNamespaceSelector: %v", ErrRender, err)
	}
	ns := ReleaseNamespace(opts)
	cur, err := d.core.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("target namespace %q does not exist; the GitRepoRestrictions require an existing namespace matching allowedTargetNamespaceSelector %q", ns, sel.String())
	}
	if err != nil {
		return fmt.Errorf("checking target namespace %q: %w", ns, err)
	}
	if !sel.Matches(labels.Set(cur.Labels)) {
		return fmt.Errorf("target namespace %q does not match allowedTargetNamespaceSelector %q of the GitRepoRestrictions", ns, sel.String())
	}
	return nil
}
