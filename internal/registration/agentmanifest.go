package registration

import (
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// AgentManifest is the input of AgentObjects.
type AgentManifest struct {
	Namespace       string
	Values          Values
	ClientID        string
	Labels          map[string]string
	Image           string
	CheckinInterval time.Duration
	// Cluster supplies agent scheduling settings (env, tolerations,
	// affinity, resources, hostNetwork) and privateRepoURL; optional.
	Cluster *fleet.Cluster
}

// AgentImage is the image an imported cluster's agent runs: image as the
// manager is configured, moved to privateRepoURL when the Cluster sets
// one, so that an air-gapped cluster pulls it from its own registry. The
// rule is Rancher Fleet's Resolve: the private registry takes the place of
// the registry the image names (the chart's systemDefaultRegistry, or
// ghcr.io by default), the repository path and tag stay; an image that
// already starts with privateRepoURL is left as it is.
func AgentImage(image, privateRepoURL string) string {
	repo := strings.TrimPrefix(strings.TrimPrefix(privateRepoURL, "https://"), "http://")
	repo = strings.TrimRight(repo, "/")
	if repo == "" || strings.HasPrefix(image, repo+"/") {
		return image
	}
	return repo + "/" + imagePath(image)
}

// imagePath is image without its registry host. As in Docker's reference
// grammar, the first component names a registry only when more follow and
// it has a "." or ":" or is "localhost"; "rancher/fleet-agent" has none.
func imagePath(image string) string {
	first, rest, ok := strings.Cut(image, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return rest
	}
	return image
}

// AgentObjects are what an import applies to the downstream cluster: the
// agent namespace, the bootstrap Secret, the agent ConfigMap, and the
// agent's ServiceAccount, RBAC and Deployment.
func AgentObjects(m AgentManifest) ([]client.Object, error) {
	ns := m.Namespace
	labels := map[string]string{"app": "fleet-agent"}
	bootstrap := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstrapSecretName, Namespace: ns},
		Data: map[string][]byte{
			"apiServerURL":                []byte(m.Values.APIServerURL),
			"apiServerCA":                 []byte(m.Values.APIServerCA),
			"token":                       []byte(m.Values.Token),
			"tokenName":                   []byte(m.Values.TokenName),
			"clusterNamespace":            []byte(m.Values.ClusterNamespace),
			"systemRegistrationNamespace": []byte(m.Values.SystemRegistrationNamespace),
		},
	}
	cfg := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: agentConfigMapName, Namespace: ns},
		Data:       map[string]string{"config": marshalConfig(AgentConfig{ClientID: m.ClientID, Labels: m.Labels, AgentTLSMode: "strict"})},
	}
	roleName := ns + "-fleet-agent-role"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: roleName}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
		{NonResourceURLs: []string{"*"}, Verbs: []string{"*"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: roleName + "-binding"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "fleet-agent", Namespace: ns}}}

	env := []corev1.EnvVar{
		{Name: "NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "CHECKIN_INTERVAL", Value: m.CheckinInterval.String()},
	}
	pod := corev1.PodSpec{
		ServiceAccountName: "fleet-agent",
		NodeSelector:       map[string]string{"kubernetes.io/os": "linux"},
		Tolerations: []corev1.Toleration{
			{Key: "node.cloudprovider.kubernetes.io/uninitialized", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule},
			{Key: "cattle.io/os", Operator: corev1.TolerationOpEqual, Value: "linux", Effect: corev1.TaintEffectNoSchedule},
		},
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000)},
		Volumes: []corev1.Volume{
			{Name: "kube", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		Containers: []corev1.Container{{
			Name: "fleet-agent", Image: m.Image, Command: []string{"fleet-agent"},
			Env:          env,
			VolumeMounts: []corev1.VolumeMount{{Name: "kube", MountPath: "/.kube"}, {Name: "tmp", MountPath: "/tmp"}},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), Privileged: ptr.To(false),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		}},
	}
	strategy := appsv1.DeploymentStrategy{}
	if c := m.Cluster; c != nil {
		pod.Containers[0].Image = AgentImage(m.Image, c.Spec.PrivateRepoURL)
		pod.Containers[0].Env = append(pod.Containers[0].Env, c.Spec.AgentEnvVars...)
		pod.Tolerations = append(pod.Tolerations, c.Spec.AgentTolerations...)
		pod.Affinity = c.Spec.AgentAffinity
		if c.Spec.AgentResources != nil {
			pod.Containers[0].Resources = *c.Spec.AgentResources
		}
		if c.Spec.HostNetwork != nil && *c.Spec.HostNetwork {
			pod.HostNetwork = true
			strategy.Type = appsv1.RecreateDeploymentStrategyType
		}
	}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: strategy,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	return []client.Object{nsObj, bootstrap, cfg, sa, role, binding, deploy}, nil
}
