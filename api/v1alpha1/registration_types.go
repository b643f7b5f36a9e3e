package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func init() {
	register(&ClusterRegistration{}, &ClusterRegistrationList{},
		&ClusterRegistrationToken{}, &ClusterRegistrationTokenList{})
}

// ClusterRegistration is an agent's request for a cluster credential. It is
// created with the import (token) credential and granted by the manager.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster-Name",type=string,JSONPath=`.status.clusterName`
// +kubebuilder:printcolumn:name="Labels",type=string,JSONPath=`.spec.clusterLabels`
type ClusterRegistration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ClusterRegistrationSpec `json:"spec,omitempty"`
	// +optional
	Status ClusterRegistrationStatus `json:"status,omitempty"`
}

// ClusterRegistrationList is a list of ClusterRegistrations.
//
// +kubebuilder:object:root=true
type ClusterRegistrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRegistration `json:"items"`
}

// ClusterRegistrationSpec identifies the registering cluster.
type ClusterRegistrationSpec struct {
	// ClientID is the cluster's identity.
	// +optional
	ClientID string `json:"clientID,omitempty"`
	// ClientRandom is a per-attempt random value; with ClientID it names the
	// registration secret.
	// +optional
	ClientRandom string `json:"clientRandom,omitempty"`
	// ClusterLabels are applied only when the Cluster is created.
	// +optional
	ClusterLabels map[string]string `json:"clusterLabels,omitempty"`
}

// ClusterRegistrationStatus says whether the request was granted.
type ClusterRegistrationStatus struct {
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// +optional
	Granted bool `json:"granted,omitempty"`
	// Conditions say why a registration is not granted (for example an
	// unknown or expired token, or a clientID owned by another workspace).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterRegistrationToken lets agents register clusters into its namespace
// until it expires.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Secret-Name",type=string,JSONPath=`.status.secretName`
type ClusterRegistrationToken struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ClusterRegistrationTokenSpec `json:"spec,omitempty"`
	// +optional
	Status ClusterRegistrationTokenStatus `json:"status,omitempty"`
}

// ClusterRegistrationTokenList is a list of ClusterRegistrationTokens.
//
// +kubebuilder:object:root=true
type ClusterRegistrationTokenList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRegistrationToken `json:"items"`
}

// ClusterRegistrationTokenSpec configures a token.
type ClusterRegistrationTokenSpec struct {
	// TTL is how long the token is valid, as a Go duration such as "240h".
	// Zero, negative or empty means it never expires.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+|0)$`
	TTL *metav1.Duration `json:"ttl,omitempty"`
}

// ClusterRegistrationTokenStatus reports where the agent values are.
type ClusterRegistrationTokenStatus struct {
	// +optional
	Expires *metav1.Time `json:"expires,omitempty"`
	// SecretName is the Secret holding the fleet-agent chart values.
	// +optional
	SecretName string `json:"secretName,omitempty"`
}
