// Package v1alpha1 holds the fleet.cattle.io/v1alpha1 API. Field names and JSON
// tags follow Rancher Fleet so that existing GitRepo, fleet.yaml, Cluster,
// ClusterGroup and token manifests apply unchanged.
//
// This package may import only apimachinery-level packages: it is shared by the
// manager, the agent and the CLI, and is what generated CRDs are built from.
//
// Every kind carries +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep":
// deleting a CRD deletes every object of its kind, so `helm uninstall
// fleet-crd`, or an upgrade to a chart without one of the CRDs, must leave
// the CRDs (and with them the fleet's GitRepos, Bundles, Clusters...) in
// place. The marker is per type in controller-gen; a new kind needs it too
// (TestEveryGeneratedCRDIsKept in internal/install fails without it).
//
// +kubebuilder:object:generate=true
// +groupName=fleet.cattle.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every Fleet kind.
	GroupVersion = schema.GroupVersion{Group: "fleet.cattle.io", Version: "v1alpha1"}

	// SchemeBuilder registers the Fleet kinds with a runtime.Scheme. It is
	// apimachinery's, not controller-runtime's, so that importing the API
	// does not import a controller framework.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the Fleet kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// knownTypes are the kinds each *_types.go file registers in its init.
	knownTypes []runtime.Object
)

// register adds kinds to the ones AddToScheme adds.
func register(objs ...runtime.Object) { knownTypes = append(knownTypes, objs...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
