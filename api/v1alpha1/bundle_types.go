package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func init() {
	register(&Bundle{}, &BundleList{})
}

// Bundle is a set of resources, and how and where to deploy them. It is built
// from one path of a GitRepo or by `fleet apply`; the manager turns it into one
// BundleDeployment per target cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="BundleDeployments-Ready",type=string,JSONPath=`.status.display.readyClusters`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type Bundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec BundleSpec `json:"spec,omitempty"`
	// +optional
	Status BundleStatus `json:"status,omitempty"`
}

// BundleList is a list of Bundles.
//
// +kubebuilder:object:root=true
type BundleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Bundle `json:"items"`
}

// TargetCustomizationMode says how targetCustomizations are chosen.
// +kubebuilder:validation:Enum=FirstMatch;AllMatches
type TargetCustomizationMode string

const (
	// FirstMatch applies only the first matching customization (default).
	FirstMatch TargetCustomizationMode = "FirstMatch"
	// AllMatches merges every matching customization in order.
	AllMatches TargetCustomizationMode = "AllMatches"
)

// BundleSpec is the desired state of a Bundle.
type BundleSpec struct {
	BundleDeploymentOptions `json:",inline"`

	// Paused stops new versions from being promoted to clusters; they show
	// OutOfSync until unpaused.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// RolloutStrategy controls how a change is promoted across clusters.
	// +optional
	RolloutStrategy *RolloutStrategy `json:"rolloutStrategy,omitempty"`

	// Resources are the files of the bundle.
	// +optional
	Resources []BundleResource `json:"resources,omitempty"`

	// Targets select clusters and customize options for them.
	// +optional
	Targets []BundleTarget `json:"targets,omitempty"`

	// TargetRestrictions is an allow-list: a cluster must match one of them
	// (when any are given) to be deployed to. GitRepo targets land here.
	// +optional
	TargetRestrictions []BundleTargetRestriction `json:"targetRestrictions,omitempty"`

	// TargetCustomizationMode is FirstMatch (default) or AllMatches.
	// +optional
	TargetCustomizationMode TargetCustomizationMode `json:"targetCustomizationMode,omitempty"`

	// DependsOn lists bundles that must be in an accepted state on a cluster
	// before this bundle is deployed there.
	// +optional
	DependsOn []BundleRef `json:"dependsOn,omitempty"`

	// ContentsID names stored contents instead of inline resources.
	// +optional
	ContentsID string `json:"contentsId,omitempty"`

	// ValuesHash is the hash of Helm values kept in a Secret rather than in
	// the spec.
	// +optional
	ValuesHash string `json:"valuesHash,omitempty"`

	// HelmOpOptions is accepted so that Bundles written by Rancher Fleet's
	// HelmOp controller (exported, or applied with strict field validation)
	// are not refused for an unknown field. It is not acted on: this
	// project's HelmOp controller reads its HelmOp's own spec, and the field
	// never reaches BundleDeployments or their deploymentIDs.
	// +optional
	HelmOpOptions *BundleHelmOpOptions `json:"helmOpOptions,omitempty"`
}

// BundleHelmOpOptions are Rancher Fleet's HelmOp settings as copied into a
// Bundle; kept for compatibility only (see BundleSpec.HelmOpOptions).
type BundleHelmOpOptions struct {
	// SecretName names a Secret with credentials for the Helm repository.
	// +optional
	SecretName string `json:"helmOpSecretName,omitempty"`
	// InsecureSkipTLSverify skips TLS verification of the Helm repository.
	// +optional
	InsecureSkipTLSverify bool `json:"helmOpInsecureSkipTLSVerify,omitempty"`
	// CABundle is a PEM bundle of CAs for the Helm repository.
	// +optional
	CABundle []byte `json:"helmOpCABundle,omitempty"`
}

// BundleResource is one file of a bundle.
type BundleResource struct {
	// Name is the file's path relative to the bundle root.
	// +optional
	Name string `json:"name,omitempty"`
	// Content is the file's content, encoded as Encoding says.
	// +optional
	Content string `json:"content,omitempty"`
	// Encoding is empty (plain text) or "base64+gz".
	// +optional
	// +kubebuilder:validation:Enum="";base64+gz
	Encoding string `json:"encoding,omitempty"`
}

// RolloutStrategy controls staged promotion of a new bundle version.
//
// Its int-or-string values take what Rancher Fleet takes, so fleet.yaml files
// written for it are not refused: an int or a quoted count ("10"), clamped
// to the number of clusters, or a percentage, possibly fractional ("12.5%")
// or above 100% (all clusters), floored to a count of at least 1.
type RolloutStrategy struct {
	// MaxUnavailable is how many (or what percentage of) clusters may be
	// unavailable during an update. Default 100%.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) != int || self >= 0",message="must not be negative"
	// +kubebuilder:validation:Pattern=`^([0-9]+|[0-9]+(\.[0-9]+)?%)$`
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// MaxUnavailablePartitions is how many partitions may be unavailable
	// before promotion stops. Default 0.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) != int || self >= 0",message="must not be negative"
	// +kubebuilder:validation:Pattern=`^([0-9]+|[0-9]+(\.[0-9]+)?%)$`
	MaxUnavailablePartitions *intstr.IntOrString `json:"maxUnavailablePartitions,omitempty"`
	// AutoPartitionSize is the size of automatic partitions. Default 25%.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) != int || self >= 0",message="must not be negative"
	// +kubebuilder:validation:Pattern=`^([0-9]+|[0-9]+(\.[0-9]+)?%)$`
	AutoPartitionSize *intstr.IntOrString `json:"autoPartitionSize,omitempty"`
	// AutoPartitionThreshold is the number of clusters from which automatic
	// partitioning starts. Default 200.
	// +optional
	// +kubebuilder:validation:XValidation:rule="type(self) != int || self >= 0",message="must not be negative"
	AutoPartitionThreshold *int `json:"autoPartitionThreshold,omitempty"`
	// MaxNew is the largest number of BundleDeployments created per pass.
	// Default 50.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxNew *int `json:"maxNew,omitempty"`
	// Partitions are manual partitions, rolled out in order.
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	Partitions []Partition `json:"partitions,omitempty"`
}

// Partition is a manually defined group of clusters in a rollout.
type Partition struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:Pattern=`^([0-9]+|[0-9]+(\.[0-9]+)?%)$`
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// +optional
	ClusterGroup string `json:"clusterGroup,omitempty"`
	// +optional
	ClusterGroupSelector *metav1.LabelSelector `json:"clusterGroupSelector,omitempty"`
}

// BundleTarget selects clusters and carries options that customize the
// deployment for them.
type BundleTarget struct {
	BundleDeploymentOptions `json:",inline"`

	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// +optional
	ClusterGroup string `json:"clusterGroup,omitempty"`
	// +optional
	ClusterGroupSelector *metav1.LabelSelector `json:"clusterGroupSelector,omitempty"`
	// DoNotDeploy skips the clusters this target matches.
	// +optional
	DoNotDeploy bool `json:"doNotDeploy,omitempty"`
}

// BundleTargetRestriction is one entry of a bundle's allow-list.
type BundleTargetRestriction struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// +optional
	ClusterGroup string `json:"clusterGroup,omitempty"`
	// +optional
	ClusterGroupSelector *metav1.LabelSelector `json:"clusterGroupSelector,omitempty"`
}

// BundleRef names a bundle, or selects bundles, that must be ready first.
type BundleRef struct {
	// Name of a bundle in the same namespace.
	// +optional
	Name string `json:"name,omitempty"`
	// Selector over bundle labels.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// AcceptedStates are the states that satisfy the dependency. Default
	// [Ready].
	// +optional
	AcceptedStates []BundleState `json:"acceptedStates,omitempty"`
}

// BundleStatus is the observed state of a Bundle.
type BundleStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`
	// +optional
	NewlyCreated int `json:"newlyCreated,omitempty"`
	// +optional
	Unavailable int `json:"unavailable"`
	// +optional
	UnavailablePartitions int `json:"unavailablePartitions"`
	// +optional
	MaxUnavailable int `json:"maxUnavailable"`
	// +optional
	MaxUnavailablePartitions int `json:"maxUnavailablePartitions"`
	// +optional
	MaxNew int `json:"maxNew,omitempty"`
	// +optional
	PartitionStatus []PartitionStatus `json:"partitions,omitempty"`
	// +optional
	Display BundleDisplay `json:"display,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`
	// +optional
	ResourcesSHA256Sum string `json:"resourcesSha256Sum,omitempty"`
	// +optional
	OCIReference string `json:"ociReference,omitempty"`
}

// PartitionStatus is the rollout state of one partition.
type PartitionStatus struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Count int `json:"count,omitempty"`
	// +optional
	MaxUnavailable int `json:"maxUnavailable,omitempty"`
	// +optional
	Unavailable int `json:"unavailable,omitempty"`
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`
}

// BundleDisplay is shown in printer columns.
type BundleDisplay struct {
	// ReadyClusters is "ready/desired".
	// +optional
	ReadyClusters string `json:"readyClusters,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
}
