package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func init() {
	register(&Content{}, &ContentList{})
}

// Content holds one distinct bundle manifest, stored once however many
// clusters deploy it. Its name is the manifest ID "s-<sha256>".
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:subresource:status
type Content struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Content is the gzip-compressed JSON manifest.
	// +optional
	Content []byte `json:"content,omitempty"`
	// SHA256Sum is the hex sha256 of the uncompressed manifest.
	// +optional
	SHA256Sum string `json:"sha256sum,omitempty"`
	// +optional
	Status ContentStatus `json:"status,omitempty"`
}

// ContentStatus tracks references.
type ContentStatus struct {
	// ReferenceCount is the number of BundleDeployments using this content.
	// +optional
	ReferenceCount int `json:"referenceCount,omitempty"`
}

// ContentList is a list of Contents.
//
// +kubebuilder:object:root=true
type ContentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Content `json:"items"`
}
