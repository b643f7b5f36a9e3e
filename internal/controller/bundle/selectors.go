package bundle

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// Condition reasons for a Bundle whose targets cannot be computed because
// an object it depends on has a selector the API server accepted but that
// cannot be evaluated (operator In without values, an unknown operator).
// Rancher Fleet logs such an object and skips it, which silently drops
// clusters and deletes their deployments; here the Bundle keeps its
// deployments and says why it is stalled.
const (
	// ReasonInvalidClusterGroup: a ClusterGroup through which one of the
	// Bundle's criteria could choose a cluster (see target.UnknownGroups).
	ReasonInvalidClusterGroup = "InvalidClusterGroup"
	// ReasonInvalidMapping: a BundleNamespaceMapping of the Bundle's
	// namespace that could map namespaces to it.
	ReasonInvalidMapping = "InvalidBundleNamespaceMapping"
)

// MappingError is a BundleNamespaceMapping that could select the bundle
// but one of whose selectors cannot be evaluated: the namespaces whose
// clusters the bundle sees are unknown.
type MappingError struct {
	Namespace, Name string
	// Field is bundleSelector or namespaceSelector.
	Field string
	Err   error
}

func (e *MappingError) Error() string {
	return fmt.Sprintf("BundleNamespaceMapping %s/%s: %s cannot be evaluated: %v; the clusters the bundle sees are unknown, so its targets are not recomputed and its BundleDeployments are left as they are until the mapping is fixed",
		e.Namespace, e.Name, e.Field, e.Err)
}

func (e *MappingError) Unwrap() error { return e.Err }

// mappedNamespaces returns the selector of the namespaces m maps to b, nil
// when m does not select b (or lacks a selector, as in Rancher Fleet). A
// selector that cannot be evaluated is an error only where skipping m
// could cost b something:
//   - a valid bundleSelector that matches b with an invalid
//     namespaceSelector: m is meant for b, and what it maps is unknown;
//   - an invalid bundleSelector: only when atRisk reports a deployment of
//     b on a Cluster of a namespace the namespaceSelector selects (any
//     namespace other than b's when that selector is invalid too). One
//     typo in a bundleSelector would otherwise stall every Bundle of the
//     namespace, including those m could never have mapped anywhere.
//
// Otherwise m is skipped. Pure but for atRisk.
func mappedNamespaces(m *fleet.BundleNamespaceMapping, b *fleet.Bundle, atRisk func(labels.Selector) (bool, error)) (labels.Selector, error) {
	if m.BundleSelector == nil || m.NamespaceSelector == nil {
		return nil, nil
	}
	bsel, berr := metav1.LabelSelectorAsSelector(m.BundleSelector)
	if berr == nil && !bsel.Matches(labels.Set(b.Labels)) {
		return nil, nil
	}
	nsel, err := metav1.LabelSelectorAsSelector(m.NamespaceSelector)
	if berr == nil {
		if err != nil {
			return nil, mappingError(m, "namespaceSelector", err)
		}
		return nsel, nil
	}
	if err != nil {
		nsel = nil
	}
	lose, rerr := atRisk(nsel)
	if rerr != nil {
		return nil, rerr
	}
	if !lose {
		return nil, nil
	}
	return nil, mappingError(m, "bundleSelector", berr)
}

func mappingError(m *fleet.BundleNamespaceMapping, field string, err error) error {
	return &target.BundleError{Err: &MappingError{Namespace: m.Namespace, Name: m.Name, Field: field, Err: err}}
}

// setTargetInputError records, as a refusal of the whole bundle (Ready
// False, Stalled), the errors of gathering its clusters that are bad
// input; others (API errors) are retried and leave the status alone.
func setTargetInputError(b *fleet.Bundle, err error) {
	var (
		be *target.BundleError
		ge *target.UnknownGroupError
		me *MappingError
	)
	switch {
	case errors.As(err, &ge):
		setRejected(b, ReasonInvalidClusterGroup, err)
	case errors.As(err, &me):
		setRejected(b, ReasonInvalidMapping, err)
	case errors.As(err, &be):
		setError(b, err)
	}
}
