package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func init() {
	register(&HelmOp{}, &HelmOpList{})
}

// HelmOp deploys a Helm chart from a chart repository (HTTP(S) or OCI) to
// clusters without a git repository: the manager resolves spec.helm's
// chart and version, stores the chart as the contents of one Bundle named
// after the HelmOp, and keeps it up to date when the version is a range.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=helmops,categories=fleet
// +kubebuilder:printcolumn:name="Repo",type=string,JSONPath=`.spec.helm.repo`
// +kubebuilder:printcolumn:name="Chart",type=string,JSONPath=`.spec.helm.chart`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="BundleDeployments-Ready",type=string,JSONPath=`.status.display.readyBundleDeployments`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type HelmOp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec HelmOpSpec `json:"spec,omitempty"`
	// +optional
	Status HelmOpStatus `json:"status,omitempty"`
}

// HelmOpList is a list of HelmOps.
//
// +kubebuilder:object:root=true
type HelmOpList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HelmOp `json:"items"`
}

// HelmOpSpec is a Bundle's spec whose helm options name a chart in a
// repository (helm.repo and helm.chart, or an oci:// chart), plus how to
// reach that repository. Resources and contentsId are ignored.
type HelmOpSpec struct {
	BundleSpec `json:",inline"`
	// Labels are added to the Bundle.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// PollingInterval re-resolves the chart version this often when
	// helm.version is a range, "*" or empty (not an exact version), so a new
	// chart release rolls out by itself. Zero or unset: no polling.
	// +optional
	PollingInterval *metav1.Duration `json:"pollingInterval,omitempty"`
	// HelmSecretName names a Secret in this namespace with the repository's
	// credentials, as for a GitRepo: keys username and password, cacerts,
	// ssh-privatekey for a git:: chart over SSH and known_hosts to verify
	// its server (without known_hosts, the known-hosts ConfigMap of the
	// manager's namespace), insecureSkipVerify and basicHTTP. They are used
	// only for the host of the chart.
	// +optional
	HelmSecretName string `json:"helmSecretName,omitempty"`
	// InsecureSkipTLSverify skips verifying the repository's certificate.
	// +optional
	InsecureSkipTLSverify bool `json:"insecureSkipTLSVerify,omitempty"`
}

// HelmOpStatus is the observed state of a HelmOp.
type HelmOpStatus struct {
	StatusBase `json:",inline"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`
	// Version is the chart version the Bundle deploys.
	// +optional
	Version string `json:"version,omitempty"`
	// LastPollingTime is when the chart version was last resolved.
	// +optional
	LastPollingTime *metav1.Time `json:"lastPollingTriggered,omitempty"`
}
