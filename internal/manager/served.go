package manager

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// servedKinds asks the API server, once, which kinds of fleet.cattle.io it
// serves. A manager upgraded before its fleet-crd chart then runs without
// the kinds the old CRDs lack (HelmOp, Policy) instead of failing to start
// on a watch or cache of an unknown kind.
func servedKinds(cfg *rest.Config) (*metav1.APIResourceList, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := dc.ServerResourcesForGroupVersion(fleet.GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		return &metav1.APIResourceList{}, nil
	case err != nil:
		return nil, fmt.Errorf("discovering %s: %w", fleet.GroupVersion, err)
	}
	return list, nil
}

// servesKind reports whether a discovery list has kind.
func servesKind(list *metav1.APIResourceList, kind string) bool {
	for _, r := range list.APIResources {
		if r.Kind == kind {
			return true
		}
	}
	return false
}
