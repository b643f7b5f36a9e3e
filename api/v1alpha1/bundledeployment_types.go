package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func init() {
	register(&BundleDeployment{}, &BundleDeploymentList{})
}

// BundleDeployment is one Bundle targeted at one cluster. It lives in the
// cluster's own namespace, the only namespace that cluster's agent can read.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Deployed",type=string,JSONPath=`.status.display.deployed`
// +kubebuilder:printcolumn:name="Monitored",type=string,JSONPath=`.status.display.monitored`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type BundleDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec BundleDeploymentSpec `json:"spec,omitempty"`
	// +optional
	Status BundleDeploymentStatus `json:"status,omitempty"`
}

// BundleDeploymentList is a list of BundleDeployments.
//
// +kubebuilder:object:root=true
type BundleDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BundleDeployment `json:"items"`
}

// The spec and the status are atomic for server-side apply: each has one
// writer (the manager, the agent), which always writes it whole, so the API
// server tracks one managedFields entry for each instead of one per field.
// That made a BundleDeployment 490 bytes smaller and each write of it
// 15-25 % cheaper for the API server (test/scale/apicost), and a rollout
// is two such writes per cluster.

// BundleDeploymentSpec is what the agent should deploy.
//
// +structType=atomic
type BundleDeploymentSpec struct {
	// Paused stops the agent from acting on this deployment.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// StagedOptions and StagedDeploymentID are the next version, waiting for
	// the rollout to promote it.
	// +optional
	StagedOptions BundleDeploymentOptions `json:"stagedOptions,omitempty"`
	// +optional
	StagedDeploymentID string `json:"stagedDeploymentID,omitempty"`
	// Options and DeploymentID are the version the agent deploys.
	// +optional
	Options BundleDeploymentOptions `json:"options,omitempty"`
	// DeploymentID is "<contentID>:<options hash>".
	// +optional
	DeploymentID string `json:"deploymentID,omitempty"`
	// +optional
	DependsOn []BundleRef `json:"dependsOn,omitempty"`
	// +optional
	CorrectDrift *CorrectDrift `json:"correctDrift,omitempty"`
	// +optional
	OCIContents bool `json:"ociContents,omitempty"`
	// ValuesHash is set when Helm values live in the Secret named like this
	// BundleDeployment, in the same namespace.
	// +optional
	ValuesHash string `json:"valuesHash,omitempty"`
	// +optional
	DownstreamResourcesGeneration int `json:"downstreamResourcesGeneration,omitempty"`
	// OffSchedule is set while the deployment's cluster is covered by a
	// Schedule that is outside its windows: the agent leaves the
	// deployment as it is until a window opens.
	// +optional
	OffSchedule bool `json:"offSchedule,omitempty"`
}

// BundleDeploymentStatus is reported by the agent.
//
// +structType=atomic
type BundleDeploymentStatus struct {
	// An atomic list, as in Fleet (whose list has no map keys): its writers
	// (the agent, and the manager marking a deployment Offline) always
	// write it whole. It keeps one
	// managedFields entry for all conditions instead of one per field of
	// each, a sixth of a deployed BundleDeployment's size that every write,
	// watch event and etcd read pays (docs/scale.md).

	// Conditions are Installed, Deployed, Monitored and Ready, written by
	// the agent.
	// +optional
	// +listType=atomic
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	AppliedDeploymentID string `json:"appliedDeploymentID,omitempty"`
	// Release is "namespace/name:version".
	// +optional
	Release string `json:"release,omitempty"`
	// +optional
	Ready bool `json:"ready,omitempty"`
	// +optional
	NonModified bool `json:"nonModified,omitempty"`
	// +optional
	NonReadyStatus []NonReadyStatus `json:"nonReadyStatus,omitempty"`
	// +optional
	ModifiedStatus []ModifiedStatus `json:"modifiedStatus,omitempty"`
	// IncompleteState is true when the lists above were capped.
	// +optional
	IncompleteState bool `json:"incompleteState,omitempty"`
	// +optional
	Display BundleDeploymentDisplay `json:"display,omitempty"`
	// +optional
	SyncGeneration *int64 `json:"syncGeneration,omitempty"`
	// +optional
	Resources []BundleDeploymentResource `json:"resources,omitempty"`
	// +optional
	ResourceCounts ResourceCounts `json:"resourceCounts,omitempty"`
	// +optional
	DownstreamResourcesGeneration int `json:"downstreamResourcesGeneration,omitempty"`
}

// BundleDeploymentDisplay is shown in printer columns.
type BundleDeploymentDisplay struct {
	// +optional
	Deployed string `json:"deployed,omitempty"`
	// +optional
	Monitored string `json:"monitored,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
}

// NonReadyStatus describes one deployed object that is not ready.
type NonReadyStatus struct {
	// +optional
	UID string `json:"uid,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Summary Summary `json:"summary,omitempty"`
}

// Summary is the readiness summary of one object.
type Summary struct {
	// +optional
	State string `json:"state,omitempty"`
	// +optional
	Error bool `json:"error,omitempty"`
	// +optional
	Transitioning bool `json:"transitioning,omitempty"`
	// +optional
	Message []string `json:"message,omitempty"`
}

// ModifiedStatus describes one object that differs from what was deployed.
type ModifiedStatus struct {
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// Missing: deployed object was deleted.
	// +optional
	Create bool `json:"missing,omitempty"`
	// Exist: object exists but is not owned by this deployment.
	// +optional
	Exist bool `json:"exist,omitempty"`
	// Delete: object should not exist any more.
	// +optional
	Delete bool `json:"delete,omitempty"`
	// Patch is the JSON merge patch from the live to the desired object.
	// +optional
	Patch string `json:"patch,omitempty"`
}

// BundleDeploymentResource is one object of the deployed release.
type BundleDeploymentResource struct {
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	CreatedAt metav1.Time `json:"createdAt,omitzero"`
}
