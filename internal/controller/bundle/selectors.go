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
// selector that cannot be evaluated is an error when it decides: the
// namespaceSelector once the bundleSelector matches or cannot be
// evaluated; the bundleSelector unless the namespaceSelector selects no
// namespace other than b's holding a Cluster (withClusters answers that):
// then the mapping cannot change the bundle's clusters, and stalling every
// Bundle of the namespace for it would help no one. Pure but for
// withClusters.
func mappedNamespaces(m *fleet.BundleNamespaceMapping, b *fleet.Bundle, withClusters func(labels.Selector) (bool, error)) (labels.Selector, error) {
	if m.BundleSelector == nil || m.NamespaceSelector == nil {
		return nil, nil
	}
	bsel, berr := metav1.LabelSelectorAsSelector(m.BundleSelector)
	if berr == nil && !bsel.Matches(labels.Set(b.Labels)) {
		return nil, nil
	}
	nsel, err := metav1.LabelSelectorAsSelector(m.NamespaceSelector)
	if err != nil && berr == nil {
		return nil, mappingError(m, "namespaceSelector", err)
	}
	if berr == nil {
		return nsel, nil
	}
	if err == nil {
		found, err := withClusters(nsel)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, nil
		}
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
