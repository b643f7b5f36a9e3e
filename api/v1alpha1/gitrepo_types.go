package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func init() {
	register(&GitRepo{}, &GitRepoList{}, &GitRepoRestriction{}, &GitRepoRestrictionList{})
}

// GitRepo tells the manager to watch a git repository and turn its paths
// into Bundles.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=gitrepos,categories=fleet
// +kubebuilder:printcolumn:name="Repo",type=string,JSONPath=`.spec.repo`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.commit`
// +kubebuilder:printcolumn:name="BundleDeployments-Ready",type=string,JSONPath=`.status.display.readyBundleDeployments`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type GitRepo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec GitRepoSpec `json:"spec,omitempty"`
	// +optional
	Status GitRepoStatus `json:"status,omitempty"`
}

// GitRepoList is a list of GitRepos.
//
// +kubebuilder:object:root=true
type GitRepoList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitRepo `json:"items"`
}

// GitRepoSpec is the desired state of a GitRepo.
type GitRepoSpec struct {
	// Repo is the git URL (https://, http://, ssh:// or git@host:path).
	// +required
	// +kubebuilder:validation:MinLength=1
	Repo string `json:"repo"`
	// Branch to follow. Default "master" unless Revision is set.
	// +optional
	Branch string `json:"branch,omitempty"`
	// Revision is a fixed commit or tag.
	// +optional
	Revision string `json:"revision,omitempty"`
	// TargetNamespace forces all resources into this namespace.
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`
	// ClientSecretName names a basic-auth or ssh-auth Secret for the repo.
	// +optional
	ClientSecretName string `json:"clientSecretName,omitempty"`
	// HelmSecretName names a Secret with Helm repository credentials.
	// +optional
	HelmSecretName string `json:"helmSecretName,omitempty"`
	// HelmSecretNameForPaths names a Secret with per-path Helm credentials.
	// +optional
	HelmSecretNameForPaths string `json:"helmSecretNameForPaths,omitempty"`
	// HelmRepoURLRegex limits which chart URLs get the Helm credentials.
	// +optional
	HelmRepoURLRegex string `json:"helmRepoURLRegex,omitempty"`
	// CABundle is PEM used to verify the git (and Helm) server.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
	// +optional
	InsecureSkipTLSverify bool `json:"insecureSkipTLSVerify,omitempty"`
	// Paths are directories (globs allowed) to read; default the root.
	// +optional
	Paths []string `json:"paths,omitempty"`
	// Paused stops propagating changes; bundles go OutOfSync.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// ServiceAccount is used downstream for deployment.
	// +optional
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// Targets select clusters; default the ClusterGroup "default".
	// +optional
	Targets []GitTarget `json:"targets,omitempty"`
	// PollingInterval is how often the remote is checked. Default 15s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+|0)$`
	PollingInterval *metav1.Duration `json:"pollingInterval,omitempty"`
	// ForceSyncGeneration: increment to force a redeploy.
	// +optional
	ForceSyncGeneration int64 `json:"forceSyncGeneration,omitempty"`
	// +optional
	KeepResources bool `json:"keepResources,omitempty"`
	// +optional
	DeleteNamespace bool `json:"deleteNamespace,omitempty"`
	// +optional
	CorrectDrift *CorrectDrift `json:"correctDrift,omitempty"`
	// DisablePolling relies on webhooks only.
	// +optional
	DisablePolling bool `json:"disablePolling,omitempty"`
	// WebhookSecret names a Secret in this namespace with webhook secrets.
	// +optional
	WebhookSecret string `json:"webhookSecret,omitempty"`
	// OCIRegistrySecret is accepted for compatibility and ignored (OCI
	// storage of contents is not implemented); a warning event says so.
	// +optional
	OCIRegistrySecret string `json:"ociRegistrySecret,omitempty"`
	// ImageScanInterval and ImageScanCommit are accepted so that Rancher
	// Fleet manifests apply unchanged under strict field validation, and
	// ignored (image scanning is not implemented); a warning event says so.
	// +optional
	ImageScanInterval *metav1.Duration `json:"imageScanInterval,omitempty"`
	// +optional
	ImageScanCommit *CommitSpec `json:"imageScanCommit,omitempty"`
	// Bundles lists bundle directories explicitly ("driven scan"); when set,
	// Paths is ignored and nothing is discovered below the listed
	// directories.
	// +optional
	Bundles []BundlePath `json:"bundles,omitempty"`
}

// CommitSpec is how Rancher Fleet's image scan writes its commits back
// (accepted, unused).
type CommitSpec struct {
	// +optional
	AuthorName string `json:"authorName,omitempty"`
	// +optional
	AuthorEmail string `json:"authorEmail,omitempty"`
	// +optional
	MessageTemplate string `json:"messageTemplate,omitempty"`
}

// BundlePath is one bundle of a driven scan: a directory and the options
// file that defines it. As in Rancher Fleet the bundle is named from
// <gitrepo>/<base>/<options file without extension> joined and cleaned
// ("/" becomes "-"): base app with options ../shared/dev.yaml is
// <gitrepo>-shared-dev.
type BundlePath struct {
	// Base is the bundle's directory, relative to the repository root.
	// +optional
	Base string `json:"base,omitempty"`
	// Options is a fleet.yaml-like file relative to Base (it may lie
	// outside Base, not outside the repository); Base's fleet.yaml (if any)
	// when empty.
	// +optional
	Options string `json:"options,omitempty"`
}

// GitTarget selects clusters for a GitRepo's bundles.
type GitTarget struct {
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

// GitRepoStatus is the observed state of a GitRepo.
type GitRepoStatus struct {
	StatusBase `json:",inline"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`
	// +optional
	UpdateGeneration int64 `json:"updateGeneration,omitempty"`
	// Commit is the commit whose bundles were last applied.
	// +optional
	Commit string `json:"commit,omitempty"`
	// +optional
	WebhookCommit string `json:"webhookCommit,omitempty"`
	// +optional
	LastWebhookTime *metav1.Time `json:"lastWebhookTime,omitempty"`
	// +optional
	PollingCommit string `json:"pollingCommit,omitempty"`
	// +optional
	LastPollingTime *metav1.Time `json:"lastPollingTriggered,omitempty"`
	// +optional
	GitJobStatus string `json:"gitJobStatus,omitempty"`
	// ConsecutiveFailures counts failed fetches since the last success; it
	// drives the polling backoff.
	// +optional
	ConsecutiveFailures int `json:"consecutiveFailures,omitempty"`
}

// GitRepoRestriction limits what GitRepos in its namespace may do.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Default-ServiceAccount",type=string,JSONPath=`.defaultServiceAccount`
// +kubebuilder:printcolumn:name="Allowed-ServiceAccounts",type=string,JSONPath=`.allowedServiceAccounts`
type GitRepoRestriction struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	DefaultServiceAccount string `json:"defaultServiceAccount,omitempty"`
	// +optional
	AllowedServiceAccounts []string `json:"allowedServiceAccounts,omitempty"`
	// AllowedRepoPatterns are regular expressions a repo URL must match.
	// +optional
	AllowedRepoPatterns []string `json:"allowedRepoPatterns,omitempty"`
	// +optional
	DefaultClientSecretName string `json:"defaultClientSecretName,omitempty"`
	// +optional
	AllowedClientSecretNames []string `json:"allowedClientSecretNames,omitempty"`
	// +optional
	AllowedTargetNamespaces []string `json:"allowedTargetNamespaces,omitempty"`
	// +optional
	AllowedTargetNamespaceSelector *metav1.LabelSelector `json:"allowedTargetNamespaceSelector,omitempty"`
}

// GitRepoRestrictionList is a list of GitRepoRestrictions.
//
// +kubebuilder:object:root=true
type GitRepoRestrictionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitRepoRestriction `json:"items"`
}
