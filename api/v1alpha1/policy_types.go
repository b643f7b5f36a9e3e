package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func init() {
	register(&Policy{}, &PolicyList{})
}

// Policy restricts what the GitRepos, HelmOps and Bundles of its namespace
// may do (Rancher Fleet v0.16). Its fields are top-level, without spec, as
// in GitRepoRestriction, so that Rancher's manifests apply unchanged, and it
// has no status: refusals are reported on the refused object.
//
// The GitRepo and HelmOp controllers apply the defaults of their section
// (gitRepo, helmOp) to an in-memory copy of the object, never to the
// user's spec, and then check it; the Bundle controller checks the service
// account of every target. Several Policies of a namespace combine: taken
// by name, booleans are ORed, lists united, and a default is the first one
// set.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
type Policy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// RequireServiceAccount refuses a GitRepo, HelmOp or Bundle target
	// whose service account is empty once the defaults are applied, so
	// that nothing of the namespace is deployed with the agent's own
	// (cluster-admin) account.
	// +optional
	RequireServiceAccount bool `json:"requireServiceAccount,omitempty"`
	// AllowedServiceAccounts, when set, are the only service accounts the
	// objects of the namespace may name.
	// +optional
	// +nullable
	AllowedServiceAccounts []string `json:"allowedServiceAccounts,omitempty"`
	// AllowNamespaceCreation lets deployments create their target
	// namespace on the downstream cluster although RequireServiceAccount
	// is set. By default (false) requireServiceAccount turns namespace
	// creation off, so that a tenant's service account needs no
	// cluster-wide right to create namespaces. A plain bool, as in Rancher
	// Fleet: unset and false mean the same.
	// +optional
	AllowNamespaceCreation bool `json:"allowNamespaceCreation,omitempty"`
	// GitRepo holds the defaults and restrictions only GitRepos follow.
	// +optional
	GitRepo *GitRepoPolicy `json:"gitRepo,omitempty"`
	// HelmOp holds the defaults and restrictions only HelmOps follow.
	// +optional
	HelmOp *HelmOpPolicy `json:"helmOp,omitempty"`
}

// GitRepoPolicy is the GitRepo section of a Policy.
type GitRepoPolicy struct {
	// DefaultServiceAccount is used by a GitRepo that names none; it is
	// applied before requireServiceAccount and allowedServiceAccounts are
	// checked.
	// +optional
	DefaultServiceAccount string `json:"defaultServiceAccount,omitempty"`
	// DefaultClientSecretName is used by a GitRepo that names no client
	// Secret.
	// +optional
	DefaultClientSecretName string `json:"defaultClientSecretName,omitempty"`
	// AllowedClientSecretNames, when set, are the only client Secrets a
	// GitRepo may name.
	// +optional
	// +nullable
	AllowedClientSecretNames []string `json:"allowedClientSecretNames,omitempty"`
	// AllowedRepoPatterns, when set, are regular expressions one of which
	// must match the whole spec.repo (a pattern equal to the URL matches
	// too).
	// +optional
	// +nullable
	AllowedRepoPatterns []string `json:"allowedRepoPatterns,omitempty"`
}

// HelmOpPolicy is the HelmOp section of a Policy.
type HelmOpPolicy struct {
	// DefaultServiceAccount is used by a HelmOp that names none; it is
	// applied before requireServiceAccount and allowedServiceAccounts are
	// checked.
	// +optional
	DefaultServiceAccount string `json:"defaultServiceAccount,omitempty"`
	// DefaultHelmSecretName is used by a HelmOp that names no helm Secret.
	// +optional
	DefaultHelmSecretName string `json:"defaultHelmSecretName,omitempty"`
	// AllowedHelmSecretNames, when set, are the only helm Secrets a HelmOp
	// may name.
	// +optional
	// +nullable
	AllowedHelmSecretNames []string `json:"allowedHelmSecretNames,omitempty"`
	// AllowedHelmRepoPatterns, when set, are regular expressions one of
	// which must match the whole spec.helm.repo.
	// +optional
	// +nullable
	AllowedHelmRepoPatterns []string `json:"allowedHelmRepoPatterns,omitempty"`
	// AllowedChartPatterns, when set, are regular expressions one of which
	// must match the whole spec.helm.chart.
	// +optional
	// +nullable
	AllowedChartPatterns []string `json:"allowedChartPatterns,omitempty"`
}

// PolicyList is a list of Policies.
//
// +kubebuilder:object:root=true
type PolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Policy `json:"items"`
}
