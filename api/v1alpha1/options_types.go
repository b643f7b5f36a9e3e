package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// BundleDeploymentOptions is how a bundle is deployed to one cluster. It is
// shared by fleet.yaml, Bundle, BundleTarget and BundleDeployment.
type BundleDeploymentOptions struct {
	// DefaultNamespace is used for objects that name no namespace.
	// +optional
	DefaultNamespace string `json:"defaultNamespace,omitempty"`

	// TargetNamespace forces every object into this namespace;
	// cluster-scoped objects are then refused.
	// +optional
	TargetNamespace string `json:"namespace,omitempty"`

	// +optional
	Kustomize *KustomizeOptions `json:"kustomize,omitempty"`

	// +optional
	Helm *HelmOptions `json:"helm,omitempty"`

	// ServiceAccount is impersonated downstream to deploy.
	// +optional
	ServiceAccount string `json:"serviceAccount,omitempty"`

	// ForceSyncGeneration forces a redeploy when it changes.
	// +optional
	ForceSyncGeneration int64 `json:"forceSyncGeneration,omitempty"`

	// +optional
	YAML *YAMLOptions `json:"yaml,omitempty"`

	// +optional
	Diff *DiffOptions `json:"diff,omitempty"`

	// KeepResources leaves deployed objects in place when the bundle goes.
	// +optional
	KeepResources bool `json:"keepResources,omitempty"`

	// DeleteCRDResources lets CRDs be deleted with the bundle.
	// +optional
	DeleteCRDResources bool `json:"deleteCRDResources,omitempty"`

	// +optional
	IgnoreOptions *IgnoreOptions `json:"ignore,omitempty"`

	// +optional
	CorrectDrift *CorrectDrift `json:"correctDrift,omitempty"`

	// +optional
	NamespaceLabels map[string]string `json:"namespaceLabels,omitempty"`

	// +optional
	NamespaceAnnotations map[string]string `json:"namespaceAnnotations,omitempty"`

	// DeleteNamespace deletes the target namespace with the bundle.
	// +optional
	DeleteNamespace bool `json:"deleteNamespace,omitempty"`

	// DownstreamResources are Secrets/ConfigMaps copied from the bundle's
	// namespace to the target namespace downstream.
	// +optional
	DownstreamResources []DownstreamResource `json:"downstreamResources,omitempty"`

	// CreateNamespace, when false, stops the agent creating the target
	// namespace.
	// +optional
	CreateNamespace *bool `json:"createNamespace,omitempty"`

	// AllowedTargetNamespaceSelector is internal: the manager copies it from
	// the namespace's GitRepoRestrictions. When set, the agent deploys only
	// into a target namespace that already exists downstream and whose
	// labels match it. It is never read from fleet.yaml.
	// +optional
	AllowedTargetNamespaceSelector *metav1.LabelSelector `json:"allowedTargetNamespaceSelector,omitempty"`
}

// KustomizeOptions selects a kustomization.
type KustomizeOptions struct {
	// Dir is the directory of the kustomization, relative to the bundle.
	// +optional
	Dir string `json:"dir,omitempty"`
}

// YAMLOptions selects overlays of raw manifests.
type YAMLOptions struct {
	// Overlays are directory names under overlays/ applied in order.
	// +optional
	Overlays []string `json:"overlays,omitempty"`
}

// HelmOptions configure how a chart is found, rendered and installed.
type HelmOptions struct {
	// Chart is a local path, a chart URL, an oci:// reference or, with Repo,
	// a chart name.
	// +optional
	Chart string `json:"chart,omitempty"`
	// Repo is an HTTP(S) or OCI Helm repository.
	// +optional
	Repo string `json:"repo,omitempty"`
	// ReleaseName overrides the release name.
	// +optional
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ReleaseName string `json:"releaseName,omitempty"`
	// Version is a chart version or semver constraint.
	// +optional
	Version string `json:"version,omitempty"`
	// TimeoutSeconds > 0 makes Helm wait for resources. A negative value
	// in a targetCustomization turns the bundle's timeout off for the
	// clusters it matches, as in Rancher Fleet; anywhere else it means no
	// wait, like 0.
	// +optional
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
	// Values are Helm values, templated per cluster with ${ } delimiters.
	// +optional
	Values *GenericMap `json:"values,omitempty"`
	// ValuesFrom reads values from ConfigMaps/Secrets on the downstream
	// cluster.
	// +optional
	ValuesFrom []ValuesFrom `json:"valuesFrom,omitempty"`
	// +optional
	Force bool `json:"force,omitempty"`
	// +optional
	TakeOwnership bool `json:"takeOwnership,omitempty"`
	// MaxHistory is the number of release revisions kept. Default 2.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxHistory int `json:"maxHistory,omitempty"`
	// ValuesFiles are read when the bundle is built.
	// +optional
	ValuesFiles []string `json:"valuesFiles,omitempty"`
	// +optional
	WaitForJobs bool `json:"waitForJobs,omitempty"`
	// +optional
	Atomic bool `json:"atomic,omitempty"`
	// DisablePreProcess turns off ${ } templating of values.
	// +optional
	DisablePreProcess bool `json:"disablePreProcess,omitempty"`
	// +optional
	DisableDNS bool `json:"disableDNS,omitempty"`
	// +optional
	SkipSchemaValidation bool `json:"skipSchemaValidation,omitempty"`
	// +optional
	DisableDependencyUpdate bool `json:"disableDependencyUpdate,omitempty"`
	// TemplateValues are templated, then parsed as YAML; they win over Values.
	// +optional
	TemplateValues map[string]string `json:"templateValues,omitempty"`
}

// ValuesFrom names one source of Helm values downstream.
type ValuesFrom struct {
	// +optional
	ConfigMapKeyRef *ConfigMapKeySelector `json:"configMapKeyRef,omitempty"`
	// +optional
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// ConfigMapKeySelector selects a key of a ConfigMap.
type ConfigMapKeySelector struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Key string `json:"key,omitempty"`
}

// SecretKeySelector selects a key of a Secret.
type SecretKeySelector struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Key string `json:"key,omitempty"`
}

// DiffOptions declare differences that are not drift.
type DiffOptions struct {
	// +optional
	ComparePatches []ComparePatch `json:"comparePatches,omitempty"`
}

// ComparePatch removes or ignores parts of one object before comparing.
type ComparePatch struct {
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Operations []Operation `json:"operations,omitempty"`
	// +optional
	JSONPointers []string `json:"jsonPointers,omitempty"`
}

// Operation is a JSON patch operation.
type Operation struct {
	// +optional
	Op string `json:"op,omitempty"`
	// +optional
	Path string `json:"path,omitempty"`
	// +optional
	Value string `json:"value,omitempty"`
}

// IgnoreOptions list conditions not taken into account for readiness.
type IgnoreOptions struct {
	// Conditions are matched by all of their key/value pairs.
	// +optional
	Conditions []map[string]string `json:"conditions,omitempty"`
}

// CorrectDrift restores resources changed outside Fleet.
type CorrectDrift struct {
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// Force recreates resources that cannot be patched.
	// +optional
	Force bool `json:"force,omitempty"`
	// KeepFailHistory keeps failed rollbacks in the release history.
	// +optional
	KeepFailHistory bool `json:"keepFailHistory,omitempty"`
}

// DownstreamResource names a Secret or ConfigMap to copy downstream.
type DownstreamResource struct {
	// +optional
	// +kubebuilder:validation:Enum=Secret;ConfigMap
	Kind string `json:"kind,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
}
