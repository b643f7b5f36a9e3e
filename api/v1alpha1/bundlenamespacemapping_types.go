package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func init() {
	register(&BundleNamespaceMapping{}, &BundleNamespaceMappingList{})
}

// BundleNamespaceMapping lets bundles in its namespace that match
// BundleSelector target clusters in namespaces that match NamespaceSelector.
// Both selectors must be set, or it matches nothing.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
type BundleNamespaceMapping struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	BundleSelector *metav1.LabelSelector `json:"bundleSelector,omitempty"`
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// BundleNamespaceMappingList is a list of BundleNamespaceMappings.
//
// +kubebuilder:object:root=true
type BundleNamespaceMappingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BundleNamespaceMapping `json:"items"`
}
