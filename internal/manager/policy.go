package manager

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// policiesServed asks the API server whether it serves Policies. A manager
// upgraded before its fleet-crd chart then runs without them (nothing is
// restricted by a Policy that cannot exist) instead of failing to start on
// a watch of an unknown kind.
func policiesServed(cfg *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, err
	}
	list, err := dc.ServerResourcesForGroupVersion(fleet.GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("discovering %s: %w", fleet.GroupVersion, err)
	}
	return servesKind(list, "Policy"), nil
}
