package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func init() {
	register(&Cluster{}, &ClusterList{}, &ClusterGroup{}, &ClusterGroupList{})
}

// Cluster is one managed (downstream) cluster, registered by its agent or
// imported by the manager from a kubeconfig Secret.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Bundles-Ready",type=string,JSONPath=`.status.display.readyBundles`
// +kubebuilder:printcolumn:name="Last-Seen",type=string,JSONPath=`.status.agent.lastSeen`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ClusterSpec `json:"spec,omitempty"`
	// +optional
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

// ClusterSpec is the desired state of a Cluster.
type ClusterSpec struct {
	// Paused stops BundleDeployment updates for this cluster.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// ClientID is the cluster's identity as presented by its agent. It
	// defaults to the UID of the downstream kube-system namespace.
	// +optional
	ClientID string `json:"clientID,omitempty"`
	// KubeConfigSecret names a Secret (key "value") with a kubeconfig the
	// manager uses once to install the agent (manager-initiated import).
	// +optional
	KubeConfigSecret string `json:"kubeConfigSecret,omitempty"`
	// KubeConfigSecretNamespace defaults to the Cluster's namespace.
	// +optional
	KubeConfigSecretNamespace string `json:"kubeConfigSecretNamespace,omitempty"`
	// RedeployAgentGeneration: bump to redeploy the agent.
	// +optional
	RedeployAgentGeneration int64 `json:"redeployAgentGeneration,omitempty"`
	// +optional
	AgentEnvVars []corev1.EnvVar `json:"agentEnvVars,omitempty"`
	// +optional
	AgentNamespace string `json:"agentNamespace,omitempty"`
	// +optional
	PrivateRepoURL string `json:"privateRepoURL,omitempty"`
	// TemplateValues are exposed as .ClusterValues to fleet.yaml templates.
	// +optional
	TemplateValues *GenericMap `json:"templateValues,omitempty"`
	// +optional
	AgentTolerations []corev1.Toleration `json:"agentTolerations,omitempty"`
	// +optional
	AgentAffinity *corev1.Affinity `json:"agentAffinity,omitempty"`
	// +optional
	AgentResources *corev1.ResourceRequirements `json:"agentResources,omitempty"`
	// +optional
	HostNetwork *bool `json:"hostNetwork,omitempty"`
	// AgentSchedulingCustomization is Rancher Fleet's PriorityClass and
	// PodDisruptionBudget for the agent the manager installs on an
	// imported cluster: with priorityClass set, a PriorityClass
	// fleet-agent-priority-class that the agent pod names; with
	// podDisruptionBudget set, a PodDisruptionBudget
	// fleet-agent-pod-disruption-budget in the agent namespace. Removing
	// either deletes what the manager created downstream. A change
	// reinstalls the agent. It has no effect on an agent installed with the
	// fleet-agent Helm chart (agent-initiated registration).
	// +optional
	AgentSchedulingCustomization *AgentSchedulingCustomization `json:"agentSchedulingCustomization,omitempty"`
	// AgentPullSecrets names image pull Secrets of the agent pod the
	// manager installs on an imported cluster, as in Rancher Fleet. The
	// Secrets are not copied: they must exist in the agent namespace of the
	// downstream cluster. A change reinstalls the agent.
	// +optional
	AgentPullSecrets *[]corev1.LocalObjectReference `json:"agentPullSecrets,omitempty"`
}

// AgentSchedulingCustomization has Rancher Fleet's shape, so that its
// Cluster manifests round-trip; see ClusterSpec.AgentSchedulingCustomization.
type AgentSchedulingCustomization struct {
	// +optional
	PriorityClass *PriorityClassSpec `json:"priorityClass,omitempty"`
	// +optional
	PodDisruptionBudget *PodDisruptionBudgetSpec `json:"podDisruptionBudget,omitempty"`
}

// PriorityClassSpec describes the PriorityClass fleet-agent-priority-class
// the manager creates for an imported cluster's agent. The API server does
// not let a PriorityClass's value or preemptionPolicy change, so the
// manager replaces its own PriorityClass when either is edited.
type PriorityClassSpec struct {
	// Value is the PriorityClass's priority, at most 1000000000 (higher
	// values are reserved for system classes).
	// +optional
	Value int `json:"value,omitempty"`
	// PreemptionPolicy is Never or PreemptLowerPriority (the default).
	// +optional
	PreemptionPolicy *corev1.PreemptionPolicy `json:"preemptionPolicy,omitempty"`
}

// PodDisruptionBudgetSpec describes the PodDisruptionBudget
// fleet-agent-pod-disruption-budget the manager creates for an imported
// cluster's agent. Values are a count of pods or a percentage ("1",
// "50%"), as strings; set at most one of them. Neither set means
// maxUnavailable 0, as in Rancher Fleet; as there, a zero ("0", "0%")
// beside the other value is ignored. Both set and non-zero, or a value
// that is not a count or a percentage of at most 100%, stops the import
// with Imported=False (reason InvalidAgentSchedulingCustomization).
type PodDisruptionBudgetSpec struct {
	// +optional
	MinAvailable string `json:"minAvailable,omitempty"`
	// +optional
	MaxUnavailable string `json:"maxUnavailable,omitempty"`
}

// ClusterStatus is the observed state of a Cluster.
type ClusterStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Namespace is the cluster's own namespace on the manager, where its
	// BundleDeployments live.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`
	// +optional
	ResourceCounts ResourceCounts `json:"resourceCounts,omitempty"`
	// +optional
	ReadyGitRepos int `json:"readyGitRepos"`
	// +optional
	DesiredReadyGitRepos int `json:"desiredReadyGitRepos"`
	// ReadyHelmOps counts the HelmOps deployed here whose deployment is
	// ready, of DesiredReadyHelmOps.
	// +optional
	ReadyHelmOps int `json:"readyHelmOps"`
	// +optional
	DesiredReadyHelmOps int `json:"desiredReadyHelmOps"`
	// +optional
	AgentDeployedGeneration *int64 `json:"agentDeployedGeneration,omitempty"`
	// AgentConfigHash fingerprints the agent the manager last installed on
	// an imported cluster: its image (after privateRepoURL), namespace,
	// env, tolerations, affinity, resources, hostNetwork,
	// agentSchedulingCustomization, agentPullSecrets, the manager's
	// apiServerURL/CA and check-in interval. The manager installs the
	// agent again when the hash of the current settings differs, so that
	// a Cluster's agent settings and a new manager agent image reach the
	// agent without a redeployAgentGeneration bump.
	// +optional
	AgentConfigHash string `json:"agentConfigHash,omitempty"`
	// AgentDeployedNamespace is the downstream namespace of the agent the
	// manager installed on an imported cluster. status.agent.namespace
	// cannot serve: every agent of the cluster writes it at check-in,
	// an old one too. An installed agent is never moved: while the
	// agent namespace differs from this one, the manager installs and
	// removes nothing (Imported reason AgentNamespaceChangeRefused).
	// Empty when the manager installed no agent, or removed it
	// (bootstrap.localAgentDisabled).
	// +optional
	AgentDeployedNamespace string `json:"agentDeployedNamespace,omitempty"`
	// +optional
	AgentMigrated bool `json:"agentMigrated,omitempty"`
	// +optional
	APIServerURL string `json:"apiServerURL,omitempty"`
	// +optional
	APIServerCAHash string `json:"apiServerCAHash,omitempty"`
	// +optional
	AgentTLSMode string `json:"agentTLSMode,omitempty"`
	// +optional
	Display ClusterDisplay `json:"display,omitempty"`
	// +optional
	Agent AgentStatus `json:"agent,omitempty"`
	// +optional
	GarbageCollectionInterval *metav1.Duration `json:"garbageCollectionInterval,omitempty"`
	// Scheduled is true while a Schedule targets this cluster: its
	// BundleDeployments then change only while ActiveSchedule is true.
	// +optional
	Scheduled bool `json:"scheduled,omitempty"`
	// ActiveSchedule is true while one of the Schedules targeting this
	// cluster is inside a window.
	// +optional
	ActiveSchedule bool `json:"activeSchedule,omitempty"`
}

// ClusterDisplay is shown in printer columns.
type ClusterDisplay struct {
	// ReadyBundles is "ready/desired".
	// +optional
	ReadyBundles string `json:"readyBundles,omitempty"`
	// ReadyNodes is "ready/total". Still reported for clients that read
	// it, but no printer column since Rancher Fleet v0.10 (nor SampleNode).
	// +optional
	ReadyNodes string `json:"readyNodes,omitempty"`
	// SampleNode is the first ready node, else the first non-ready one.
	// +optional
	SampleNode string `json:"sampleNode,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
}

// AgentStatus is written by the cluster's agent (heartbeat).
type AgentStatus struct {
	// +optional
	LastSeen metav1.Time `json:"lastSeen,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	NonReadyNodes int `json:"nonReadyNodes,omitempty"`
	// +optional
	ReadyNodes int `json:"readyNodes,omitempty"`
	// NonReadyNodeNames holds at most three names.
	// +optional
	NonReadyNodeNames []string `json:"nonReadyNodeNames,omitempty"`
	// ReadyNodeNames holds at most three names.
	// +optional
	ReadyNodeNames []string `json:"readyNodeNames,omitempty"`
	// CheckinInterval is how often the agent checks in (before its jitter
	// of up to 10%), reported with every check-in. The manager takes the
	// cluster to be Offline 3 × the longer of this and its own
	// agentCheckinInterval after the last check-in, so that an agent
	// installed with a longer interval than the manager's does not flip
	// Offline between check-ins. Unset (an agent that does not report it):
	// the manager's interval.
	// +optional
	CheckinInterval *metav1.Duration `json:"checkinInterval,omitempty"`
}

// ClusterGroup is a named set of clusters chosen by label selector.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fleet
// +kubebuilder:printcolumn:name="Clusters-Ready",type=string,JSONPath=`.status.display.readyClusters`
// +kubebuilder:printcolumn:name="Bundles-Ready",type=string,JSONPath=`.status.display.readyBundles`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type ClusterGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ClusterGroupSpec `json:"spec,omitempty"`
	// +optional
	Status ClusterGroupStatus `json:"status,omitempty"`
}

// ClusterGroupList is a list of ClusterGroups.
//
// +kubebuilder:object:root=true
type ClusterGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterGroup `json:"items"`
}

// ClusterGroupSpec selects clusters by label. A nil selector matches none.
type ClusterGroupSpec struct {
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// ClusterGroupStatus summarises the group's clusters.
type ClusterGroupStatus struct {
	// +optional
	ClusterCount int `json:"clusterCount"`
	// +optional
	NonReadyClusterCount int `json:"nonReadyClusterCount"`
	// NonReadyClusters holds at most ten names.
	// +optional
	NonReadyClusters []string `json:"nonReadyClusters,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`
	// +optional
	Display ClusterGroupDisplay `json:"display,omitempty"`
	// +optional
	ResourceCounts ResourceCounts `json:"resourceCounts,omitempty"`
}

// ClusterGroupDisplay is shown in printer columns.
type ClusterGroupDisplay struct {
	// +optional
	ReadyClusters string `json:"readyClusters,omitempty"`
	// +optional
	ReadyBundles string `json:"readyBundles,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
}
