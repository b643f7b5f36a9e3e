package v1alpha1

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Well-known labels and annotations. The values match Rancher Fleet's so that
// selectors and tooling written for Fleet keep working.
const (
	LabelPrefix = "fleet.cattle.io/"

	RepoLabel                = "fleet.cattle.io/repo-name"
	HelmOpLabel              = "fleet.cattle.io/fleet-helm-name"
	CommitLabel              = "fleet.cattle.io/commit"
	BundleLabel              = "fleet.cattle.io/bundle-name"
	BundleNamespaceLabel     = "fleet.cattle.io/bundle-namespace"
	ManagedLabel             = "fleet.cattle.io/managed"
	ClusterLabel             = "fleet.cattle.io/cluster"
	ClusterNamespaceLabel    = "fleet.cattle.io/cluster-namespace"
	ContentNameLabel         = "fleet.cattle.io/content-name"
	RegistrationTokenLabel   = "fleet.cattle.io/registration-token"
	ClusterRegistrationLabel = "fleet.cattle.io/cluster-registration"
	ClusterRegistrationNS    = "fleet.cattle.io/cluster-registration-namespace"
	ClusterManagementLabel   = "fleet.cattle.io/cluster-management"
	CreatedByAgentPodLabel   = "fleet.cattle.io/created-by-agent-pod"
	NonManagedAgentLabel     = "fleet.cattle.io/non-managed-agent"
	ShardLabel               = "fleet.cattle.io/shard-ref"
	BundleDeploymentLabel    = "fleet.cattle.io/bundledeployment"
	ClusterDisplayNameLabel  = "management.cattle.io/cluster-display-name"
	CreatedByUserIDLabel     = "fleet.cattle.io/created-by-user-id"
	BundleInternalSecretLbl  = "fleet.cattle.io/bundle-internal-secret"
	AgentNamespaceAnnotation = "fleet.cattle.io/agent-namespace"
	BundleIDAnnotation       = "fleet.cattle.io/bundle-id"
	CommitAnnotation         = "fleet.cattle.io/commit"
	KeepResourcesAnnotation  = "fleet.cattle.io/keep-resources"
	ServiceAccountAnnotation = "fleet.cattle.io/service-account"
	// CredentialOfRegistrationLabel is on an agent's ServiceAccount and
	// RBAC: the ClusterRegistration the credential was granted for.
	CredentialOfRegistrationLabel = "fleet.cattle.io/credential-of-registration"
	// ClusterRegistrationFinalizer is the manager's finalizer on a
	// ClusterRegistration: deleting it revokes the credential it was
	// granted. An agent that knows the manager (it serves the content API
	// hand-over) sets it at creation, which spares the manager an update.
	ClusterRegistrationFinalizer = "fleet.cattle.io/cluster-registration"
)

// Secret types written by the manager.
const (
	SecretTypeClusterRegistrationValues = "fleet.cattle.io/cluster-registration-values"
	SecretTypeAgentCredential           = "fleet.cattle.io/agent-credential"
	SecretTypeBundleValues              = "fleet.cattle.io/bundle-values/v1alpha1"
	SecretTypeBundleDeploymentOptions   = "fleet.cattle.io/bundle-deployment/v1alpha1"
)

// Default namespaces, as in Fleet.
const (
	DefaultSystemNamespace             = "cattle-fleet-system"
	DefaultSystemRegistrationNamespace = "cattle-fleet-clusters-system"
	BootstrapNamespace                 = "fleet-local"
	DefaultWorkspace                   = "fleet-default"
	LocalClusterName                   = "local"
	DefaultClusterGroup                = "default"
)

// Condition types shared by several kinds.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
	ConditionAccepted    = "Accepted"
	ConditionGitPolling  = "GitPolling"
	ConditionPolled      = "Polled"
	ConditionInstalled   = "Installed"
	ConditionDeployed    = "Deployed"
	ConditionMonitored   = "Monitored"
	ConditionProcessed   = "Processed"
	ConditionImported    = "Imported"
	ConditionReconciled  = "Reconciled"
	ConditionOffline     = "Offline"
)

// BundleState is the state of one BundleDeployment, or the worst state of a
// group of them.
// +kubebuilder:validation:Enum=Ready;NotReady;WaitApplied;ErrApplied;OutOfSync;Pending;Modified;Offline
type BundleState string

const (
	Ready       BundleState = "Ready"
	NotReady    BundleState = "NotReady"
	WaitApplied BundleState = "WaitApplied"
	ErrApplied  BundleState = "ErrApplied"
	OutOfSync   BundleState = "OutOfSync"
	Pending     BundleState = "Pending"
	Modified    BundleState = "Modified"
	// Offline marks deployments of clusters whose agent has not checked in
	// within the offline threshold. Fleet has no such state; it is what keeps
	// one unreachable cluster from blocking a rollout.
	Offline BundleState = "Offline"
)

// ClusterWaitCheckIn is a Cluster's display state, and its Offline
// condition's reason, until its agent first checks in: registering a
// cluster is not an outage.
const ClusterWaitCheckIn = "WaitCheckIn"

// StateRank orders states from best (low) to worst (high), as Fleet does.
var StateRank = map[BundleState]int{
	ErrApplied:  7,
	WaitApplied: 6,
	Modified:    5,
	OutOfSync:   4,
	Pending:     3,
	NotReady:    2,
	Offline:     2,
	Ready:       1,
}

// GenericMap holds free-form YAML/JSON such as Helm values. It is stored
// schemaless so that any values document round-trips unchanged.
//
// +kubebuilder:validation:Type=object
// +kubebuilder:pruning:PreserveUnknownFields
// +k8s:deepcopy-gen=false
type GenericMap struct {
	Data map[string]interface{} `json:"-"`
}

// MarshalJSON writes the map itself, not a wrapper object.
func (in GenericMap) MarshalJSON() ([]byte, error) {
	if in.Data == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(in.Data)
}

// UnmarshalJSON reads any JSON object.
func (in *GenericMap) UnmarshalJSON(data []byte) error {
	in.Data = map[string]interface{}{}
	return json.Unmarshal(data, &in.Data)
}

// DeepCopyInto copies the map, which holds only JSON-compatible values.
func (in *GenericMap) DeepCopyInto(out *GenericMap) {
	if in.Data == nil {
		out.Data = nil
		return
	}
	out.Data = runtime.DeepCopyJSON(in.Data)
}

// DeepCopy returns a deep copy.
func (in *GenericMap) DeepCopy() *GenericMap {
	if in == nil {
		return nil
	}
	out := new(GenericMap)
	in.DeepCopyInto(out)
	return out
}

// BundleSummary counts BundleDeployments by state and lists the worst few.
type BundleSummary struct {
	// +optional
	NotReady int `json:"notReady,omitempty"`
	// +optional
	WaitApplied int `json:"waitApplied,omitempty"`
	// +optional
	ErrApplied int `json:"errApplied,omitempty"`
	// +optional
	OutOfSync int `json:"outOfSync,omitempty"`
	// +optional
	Modified int `json:"modified,omitempty"`
	// +optional
	Ready int `json:"ready"`
	// +optional
	Pending int `json:"pending,omitempty"`
	// Offline counts deployments to clusters whose agent is offline.
	// +optional
	Offline int `json:"offline,omitempty"`
	// +optional
	DesiredReady int `json:"desiredReady"`
	// NonReadyResources lists at most ten deployments that are not ready, so
	// that status never outgrows etcd's object size limit.
	// +optional
	NonReadyResources []NonReadyResource `json:"nonReadyResources,omitempty"`
}

// NonReadyResource describes one BundleDeployment that is not ready.
type NonReadyResource struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	State BundleState `json:"bundleState,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	ModifiedStatus []ModifiedStatus `json:"modifiedStatus,omitempty"`
	// +optional
	NonReadyStatus []NonReadyStatus `json:"nonReadyStatus,omitempty"`
}

// ResourceCounts counts deployed resources by state.
type ResourceCounts struct {
	// +optional
	Ready int `json:"ready"`
	// +optional
	DesiredReady int `json:"desiredReady"`
	// +optional
	WaitApplied int `json:"waitApplied"`
	// +optional
	Modified int `json:"modified"`
	// +optional
	Orphaned int `json:"orphaned"`
	// +optional
	Missing int `json:"missing"`
	// +optional
	Unknown int `json:"unknown"`
	// +optional
	NotReady int `json:"notReady"`
}

// Add adds other's counts to these.
func (in *ResourceCounts) Add(other ResourceCounts) {
	in.Ready += other.Ready
	in.DesiredReady += other.DesiredReady
	in.WaitApplied += other.WaitApplied
	in.Modified += other.Modified
	in.Orphaned += other.Orphaned
	in.Missing += other.Missing
	in.Unknown += other.Unknown
	in.NotReady += other.NotReady
}

// Resource is one deployed object summarised across clusters.
type Resource struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Type string `json:"type,omitempty"`
	// +optional
	ID string `json:"id,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	IncompleteState bool `json:"incompleteState,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
	// +optional
	Error bool `json:"error,omitempty"`
	// +optional
	Transitioning bool `json:"transitioning,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	PerClusterState *PerClusterState `json:"perClusterState,omitempty"`
}

// PerClusterState lists cluster IDs by the state of one resource there.
type PerClusterState struct {
	// +optional
	Ready []string `json:"ready,omitempty"`
	// +optional
	WaitApplied []string `json:"waitApplied,omitempty"`
	// +optional
	Pending []string `json:"pending,omitempty"`
	// +optional
	Modified []string `json:"modified,omitempty"`
	// +optional
	Orphaned []string `json:"orphaned,omitempty"`
	// +optional
	Missing []string `json:"missing,omitempty"`
	// +optional
	Unknown []string `json:"unknown,omitempty"`
	// +optional
	NotReady []string `json:"notReady,omitempty"`
}

// StatusDisplay is the human summary shown in printer columns.
type StatusDisplay struct {
	// ReadyBundleDeployments is "ready/desired".
	// +optional
	ReadyBundleDeployments string `json:"readyBundleDeployments,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	Error bool `json:"error,omitempty"`
}

// StatusBase is shared by the status of GitRepo and HelmOp.
type StatusBase struct {
	// ReadyClusters is the lowest number of ready clusters over all bundles.
	// +optional
	ReadyClusters int `json:"readyClusters"`
	// +optional
	DesiredReadyClusters int `json:"desiredReadyClusters"`
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`
	// +optional
	Display StatusDisplay `json:"display,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Resources lists at most a bounded number of deployed resources.
	// +optional
	Resources []Resource `json:"resources,omitempty"`
	// +optional
	ResourceCounts ResourceCounts `json:"resourceCounts,omitempty"`
	// +optional
	PerClusterResourceCounts map[string]*ResourceCounts `json:"perClusterResourceCounts,omitempty"`
}
