package registration

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
)

// AgentManifest is the input of AgentObjects.
type AgentManifest struct {
	Namespace       string
	Values          Values
	ClientID        string
	Labels          map[string]string
	Image           string
	CheckinInterval time.Duration
	// GarbageCollectionInterval is the agent's garbageCollectionInterval;
	// zero or the agent's default (15m) leaves it out (see gcInterval).
	GarbageCollectionInterval time.Duration
	// Settings are the manager's agent settings (chart values
	// agentImage.imagePullPolicy and agent.*); a zero or default one
	// leaves the objects as they were without it (see agentSettingsEnv).
	Settings AgentSettings
	// Cluster supplies agent scheduling settings (env, tolerations,
	// affinity, resources, hostNetwork, agentSchedulingCustomization,
	// agentPullSecrets) and privateRepoURL; optional.
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

// AgentObjects are what an import applies to the downstream cluster, in
// order: the agent namespace, the bootstrap Secret, the agent ConfigMap,
// the agent's ServiceAccount and RBAC, the PriorityClass and
// PodDisruptionBudget of the Cluster's agentSchedulingCustomization (when
// it sets them), and the agent's Deployment. A customization that cannot
// be applied is an *AgentSpecError.
//
// A Cluster without agentSchedulingCustomization and agentPullSecrets
// yields the very objects it did before the manager applied them, so that
// its agentConfigHash, and its agent, stay as they are.
func AgentObjects(m AgentManifest) ([]client.Object, error) {
	ns := m.Namespace
	var scheduling []client.Object
	labels := map[string]string{"app": "fleet-agent"}
	gc := gcInterval(m.GarbageCollectionInterval)
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
		Data: map[string]string{"config": marshalConfig(AgentConfig{
			ClientID: m.ClientID, Labels: m.Labels, AgentTLSMode: "strict", GarbageCollectionInterval: gc,
		})},
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
	// Before the Cluster's agentEnvVars, which may override them.
	env = append(env, agentSettingsEnv(m.Settings)...)
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
			ImagePullPolicy: agentPullPolicy(m.Settings.ImagePullPolicy),
			Env:             env,
			VolumeMounts:    []corev1.VolumeMount{{Name: "kube", MountPath: "/.kube"}, {Name: "tmp", MountPath: "/tmp"}},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), Privileged: ptr.To(false),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		}},
	}
	strategy := appsv1.DeploymentStrategy{}
	if c := m.Cluster; c != nil {
		pod.Containers[0].Image = AgentImage(m.Image, c.Spec.PrivateRepoURL)
		pod.Containers[0].Env = withClusterEnv(pod.Containers[0].Env, c.Spec.AgentEnvVars)
		pod.Tolerations = append(pod.Tolerations, c.Spec.AgentTolerations...)
		pod.Affinity = c.Spec.AgentAffinity
		if c.Spec.AgentResources != nil {
			pod.Containers[0].Resources = *c.Spec.AgentResources
		}
		if c.Spec.HostNetwork != nil && *c.Spec.HostNetwork {
			pod.HostNetwork = true
			strategy.Type = appsv1.RecreateDeploymentStrategyType
		}
		if c.Spec.AgentPullSecrets != nil && len(*c.Spec.AgentPullSecrets) > 0 {
			pod.ImagePullSecrets = append([]corev1.LocalObjectReference(nil), *c.Spec.AgentPullSecrets...)
		}
		if sc := c.Spec.AgentSchedulingCustomization; sc != nil {
			pc, err := AgentPriorityClass(sc.PriorityClass)
			if err != nil {
				return nil, err
			}
			if pc != nil {
				pod.PriorityClassName = pc.Name
				scheduling = append(scheduling, pc)
			}
			pdb, err := AgentPodDisruptionBudget(ns, sc.PodDisruptionBudget)
			if err != nil {
				return nil, err
			}
			if pdb != nil {
				scheduling = append(scheduling, pdb)
			}
		}
	}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(agentReplicas(m.Settings.Replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: strategy,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: gcAnnotations(gc)}, Spec: pod},
		},
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	objs := []client.Object{nsObj, bootstrap, cfg, sa, role, binding}
	// Before the Deployment: admission refuses a pod whose PriorityClass
	// does not exist yet.
	objs = append(objs, scheduling...)
	return append(objs, deploy), nil
}

// withClusterEnv is the manager's env of the agent followed by the
// Cluster's agentEnvVars, without the manager's entries whose name the
// Cluster sets: the Cluster's value wins, and a name twice in the list
// would make server-side apply refuse the Deployment. Without such a name
// it is own with cluster appended, so that the manifest (and the
// agentConfigHash) of other Clusters stays the same.
func withClusterEnv(own, cluster []corev1.EnvVar) []corev1.EnvVar {
	set := make(map[string]bool, len(cluster))
	for _, e := range cluster {
		set[e.Name] = true
	}
	kept := own[:0:0]
	for _, e := range own {
		if !set[e.Name] {
			kept = append(kept, e)
		}
	}
	return append(kept, cluster...)
}

// agentSettingsEnv are the environment variables through which the agent
// reads s, the ones the fleet-agent chart sets: only for a setting that is
// set and differs from the agent's own default, so that the defaults
// leave the Deployment, its agentConfigHash and the agents imported
// before as they are.
func agentSettingsEnv(s AgentSettings) []corev1.EnvVar {
	var env []corev1.EnvVar
	if s.Workers > 0 && s.Workers != register.DefaultWorkers {
		env = append(env, corev1.EnvVar{Name: "BUNDLEDEPLOYMENT_RECONCILER_WORKERS", Value: strconv.Itoa(s.Workers)})
	}
	for _, e := range []struct {
		name   string
		d, def time.Duration
	}{
		{name: "CATTLE_ELECTION_LEASE_DURATION", d: s.LeaseDuration, def: register.DefaultLeaseDuration},
		{name: "CATTLE_ELECTION_RENEW_DEADLINE", d: s.RenewDeadline, def: register.DefaultRenewDeadline},
		{name: "CATTLE_ELECTION_RETRY_PERIOD", d: s.RetryPeriod, def: register.DefaultRetryPeriod},
	} {
		if e.d > 0 && e.d != e.def {
			env = append(env, corev1.EnvVar{Name: e.name, Value: e.d.String()})
		}
	}
	return env
}

// agentPullPolicy is the agent container's imagePullPolicy for p: none
// for "" or IfNotPresent, which Kubernetes applies to a tagged image
// anyway, so that the default changes no agent imported before.
func agentPullPolicy(p corev1.PullPolicy) corev1.PullPolicy {
	if p == corev1.PullIfNotPresent {
		return ""
	}
	return p
}

// agentReplicas is the agent Deployment's replicas for n: 1 when unset.
func agentReplicas(n int32) int32 {
	if n <= 0 {
		return agentDefaultReplicas
	}
	return n
}

// AgentGCIntervalAnnotation, on the agent's pod template, repeats the
// garbageCollectionInterval of its ConfigMap: the agent reads the interval
// only when it starts, and a changed ConfigMap alone restarts nothing, so
// the changed pod template rolls the agent out again (the ConfigMap is
// applied before the Deployment, so the new pod reads the new interval).
const AgentGCIntervalAnnotation = "fleet.cattle.io/garbage-collection-interval"

// gcInterval is the garbageCollectionInterval written for d: "" (not
// written) when d is zero, negative or the agent's default anyway, so that
// the default leaves the agent objects, their agentConfigHash and the
// agents imported before as they are; otherwise a Go duration.
func gcInterval(d time.Duration) string {
	if d <= 0 || d == register.DefaultGCInterval {
		return ""
	}
	return d.String()
}

// gcAnnotations are the pod template annotations for interval gc (see
// AgentGCIntervalAnnotation); nil when it is not written.
func gcAnnotations(gc string) map[string]string {
	if gc == "" {
		return nil
	}
	return map[string]string{AgentGCIntervalAnnotation: gc}
}

// Names of the objects an import creates for agentSchedulingCustomization,
// Rancher Fleet's, so that tools and docs written for it find them.
const (
	AgentPriorityClassName        = "fleet-agent-priority-class"
	AgentPodDisruptionBudgetName  = "fleet-agent-pod-disruption-budget"
	agentPriorityClassDescription = "Priority class for Fleet Agent"
	// AgentManagedByLabel (value AgentManagedByValue) marks the
	// PriorityClass and PodDisruptionBudget the manager made downstream:
	// when the customization is removed only those are deleted, never an
	// object of the same name someone else made.
	AgentManagedByLabel = "app.kubernetes.io/managed-by"
	AgentManagedByValue = "fleet"
	// maxUserPriority is the highest value the API server allows a
	// PriorityClass that is not a system one.
	maxUserPriority = 1_000_000_000
)

// AgentSpecError is a Cluster agent setting that cannot be applied (bad
// input): the import stops and says so on the Cluster, without retrying,
// for only an edit of the Cluster can fix it; what is installed downstream
// stays as it is.
type AgentSpecError struct {
	// Field is the path of the setting, e.g.
	// spec.agentSchedulingCustomization.podDisruptionBudget.
	Field string
	Msg   string
}

func (e *AgentSpecError) Error() string { return e.Field + ": " + e.Msg }

// agentManagedLabels are the labels of the objects AgentManagedByLabel
// marks.
func agentManagedLabels() map[string]string {
	return map[string]string{AgentManagedByLabel: AgentManagedByValue}
}

// AgentPriorityClass is the agent's PriorityClass for spec, nil when
// spec is nil. Its value must be one a user may give (at most 1e9) and its
// preemptionPolicy one the API server knows, checked here so that a typo
// stops the import with a clear message rather than retrying a refused
// apply.
func AgentPriorityClass(spec *fleet.PriorityClassSpec) (*schedulingv1.PriorityClass, error) {
	if spec == nil {
		return nil, nil
	}
	const field = "spec.agentSchedulingCustomization.priorityClass"
	if spec.Value > maxUserPriority || spec.Value < math.MinInt32 {
		return nil, &AgentSpecError{Field: field + ".value", Msg: fmt.Sprintf("%d is out of range: from %d to %d (higher values are reserved for system priority classes)",
			spec.Value, math.MinInt32, maxUserPriority)}
	}
	if p := spec.PreemptionPolicy; p != nil && *p != corev1.PreemptNever && *p != corev1.PreemptLowerPriority {
		return nil, &AgentSpecError{Field: field + ".preemptionPolicy", Msg: fmt.Sprintf("%q is not one of %s, %s", *p, corev1.PreemptLowerPriority, corev1.PreemptNever)}
	}
	return &schedulingv1.PriorityClass{
		ObjectMeta:       metav1.ObjectMeta{Name: AgentPriorityClassName, Labels: agentManagedLabels()},
		Value:            int32(spec.Value),
		PreemptionPolicy: spec.PreemptionPolicy,
		Description:      agentPriorityClassDescription,
	}, nil
}

// AgentPodDisruptionBudget is the PodDisruptionBudget of the agent in ns
// for spec, nil when spec is nil. As in Rancher Fleet a spec that sets
// neither minAvailable nor maxUnavailable means maxUnavailable 0; one that
// sets both is refused (a PodDisruptionBudget takes one of them), and so
// is a value that is neither a count nor a percentage of at most 100%.
func AgentPodDisruptionBudget(ns string, spec *fleet.PodDisruptionBudgetSpec) (*policyv1.PodDisruptionBudget, error) {
	if spec == nil {
		return nil, nil
	}
	const field = "spec.agentSchedulingCustomization.podDisruptionBudget"
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: AgentPodDisruptionBudgetName, Namespace: ns, Labels: agentManagedLabels()},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fleet-agent"}}},
	}
	// As in Rancher Fleet, a zero beside the other value is no value: it
	// would forbid nothing (maxUnavailable) or ask for nothing
	// (minAvailable), and Rancher Cluster manifests carry such pairs.
	minAvail, maxUnavail := spec.MinAvailable, spec.MaxUnavailable
	if minAvail != "" && maxUnavail != "" {
		if zeroPods(minAvail) {
			minAvail = ""
		} else if zeroPods(maxUnavail) {
			maxUnavail = ""
		}
	}
	switch {
	case minAvail != "" && maxUnavail != "":
		return nil, &AgentSpecError{Field: field, Msg: fmt.Sprintf("minAvailable (%q) and maxUnavailable (%q) are both set; set only one", minAvail, maxUnavail)}
	case minAvail != "":
		v, err := intOrPercent(minAvail)
		if err != nil {
			return nil, &AgentSpecError{Field: field + ".minAvailable", Msg: err.Error()}
		}
		pdb.Spec.MinAvailable = &v
	case maxUnavail != "":
		v, err := intOrPercent(maxUnavail)
		if err != nil {
			return nil, &AgentSpecError{Field: field + ".maxUnavailable", Msg: err.Error()}
		}
		pdb.Spec.MaxUnavailable = &v
	default:
		pdb.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(0))
	}
	return pdb, nil
}

// zeroPods says whether s, a PodDisruptionBudget value, is zero pods ("0"
// or "0%").
func zeroPods(s string) bool { return s == "0" || s == "0%" }

// intOrPercent parses s as a PodDisruptionBudget's minAvailable or
// maxUnavailable: a count of pods (0 or more) or a percentage (0% to 100%).
func intOrPercent(s string) (intstr.IntOrString, error) {
	v := intstr.Parse(s)
	switch {
	case v.Type == intstr.Int && v.IntVal < 0:
		return v, fmt.Errorf("%q is negative: want a count of pods (0 or more) or a percentage such as \"50%%\"", s)
	case v.Type == intstr.Int:
		return v, nil
	case len(validation.IsValidPercent(s)) > 0:
		return v, fmt.Errorf("%q is neither a count of pods nor a percentage such as \"50%%\"", s)
	}
	if n, err := intstr.GetScaledValueFromIntOrPercent(&v, 100, false); err != nil || n > 100 {
		return v, fmt.Errorf("%q is more than 100%%", s)
	}
	return v, nil
}

// applyAgent applies objs (AgentObjects' output) downstream in their
// order, then deletes the PriorityClass and PodDisruptionBudget of a
// customization removed since, when the manager made them (agentPruned)
// and, for the PriorityClass, no fleet-agent Deployment still names it.
// A PriorityClass the manager made with another value or preemptionPolicy
// is deleted before it is applied: the API server refuses to change
// either, and pods keep the priority they were given.
func applyAgent(ctx context.Context, down client.Client, objs []client.Object) error {
	var ns string
	var hasPriorityClass, hasPDB bool
	for _, o := range objs {
		switch o := o.(type) {
		case *schedulingv1.PriorityClass:
			hasPriorityClass = true
			if err := replaceChangedPriorityClass(ctx, down, o); err != nil {
				return err
			}
		case *policyv1.PodDisruptionBudget:
			hasPDB = true
		case *appsv1.Deployment:
			ns = o.Namespace
		}
		if err := apply(ctx, down, o); err != nil {
			return err
		}
	}
	pc, pdb := agentPruned(ns)
	if !hasPriorityClass {
		if err := deleteIfManaged(ctx, down, pc, priorityClassInUse); err != nil {
			return err
		}
	}
	if !hasPDB {
		return deleteIfManaged(ctx, down, pdb, nil)
	}
	return nil
}

// agentPruned are the objects of an agent in ns that its Cluster's
// customization may leave out, and that an install then deletes.
func agentPruned(ns string) (*schedulingv1.PriorityClass, *policyv1.PodDisruptionBudget) {
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: AgentPriorityClassName}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: AgentPodDisruptionBudgetName, Namespace: ns}}
}

// priorityClassInUse says whether a fleet-agent Deployment downstream
// still names the PriorityClass pc. It is one for the whole cluster, and
// the agent of another Cluster importing the same cluster (in another
// agentNamespace) may still use it: deleting it would keep that agent's
// pods from being created again.
func priorityClassInUse(ctx context.Context, down client.Client, pc client.Object) (bool, error) {
	deps := &appsv1.DeploymentList{}
	if err := down.List(ctx, deps, client.MatchingLabels{"app": "fleet-agent"}); err != nil {
		return false, fmt.Errorf("listing fleet-agent deployments: %w", err)
	}
	for _, d := range deps.Items {
		if d.Spec.Template.Spec.PriorityClassName == pc.GetName() {
			return true, nil
		}
	}
	return false, nil
}

// replaceChangedPriorityClass deletes the downstream PriorityClass named
// as want when the manager made it and it differs from want in what the
// API server does not let change.
func replaceChangedPriorityClass(ctx context.Context, down client.Client, want *schedulingv1.PriorityClass) error {
	have := &schedulingv1.PriorityClass{}
	if err := down.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil {
		return client.IgnoreNotFound(err)
	}
	policy := func(p *corev1.PreemptionPolicy) corev1.PreemptionPolicy {
		return ptr.Deref(p, corev1.PreemptLowerPriority)
	}
	if have.Value == want.Value && policy(have.PreemptionPolicy) == policy(want.PreemptionPolicy) {
		return nil
	}
	return deleteIfManaged(ctx, down, have, nil)
}

// deleteIfManaged deletes obj downstream when it carries
// AgentManagedByLabel and inUse (when given) says no one needs it; missing
// is fine. The delete is conditional on the UID read, so that an object
// someone made in its place meanwhile stays.
func deleteIfManaged(ctx context.Context, down client.Client, obj client.Object,
	inUse func(context.Context, client.Client, client.Object) (bool, error)) error {
	if err := down.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if meta.IsNoMatchError(err) {
			// A cluster that does not serve the kind (policy/v1 before
			// Kubernetes 1.21) has no such object to prune.
			return nil
		}
		return client.IgnoreNotFound(err)
	}
	if obj.GetLabels()[AgentManagedByLabel] != AgentManagedByValue {
		return nil
	}
	if inUse != nil {
		if used, err := inUse(ctx, down, obj); err != nil || used {
			return err
		}
	}
	uid := obj.GetUID()
	if err := down.Delete(ctx, obj, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}
