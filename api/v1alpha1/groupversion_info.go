// Package v1alpha1 holds the fleet.cattle.io/v1alpha1 API. Field names and JSON
// tags follow Rancher Fleet so that existing GitRepo, fleet.yaml, Cluster,
// ClusterGroup and token manifests apply unchanged.
//
// This package may import only apimachinery-level packages: it is shared by the
// manager, the agent and the CLI, and is what generated CRDs are built from.
//
// +kubebuilder:object:generate=true
// +groupName=fleet.cattle.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every Fleet kind.
	GroupVersion = schema.GroupVersion{Group: "fleet.cattle.io", Version: "v1alpha1"}

	// SchemeBuilder registers the Fleet kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the Fleet kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
