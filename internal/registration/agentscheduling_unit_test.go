package registration

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	fleetscheme "github.com/fleetgo/fleet/internal/scheme"
)

// TestAgentConfigHashUnchangedWithoutScheduling: a Cluster that sets
// neither agentSchedulingCustomization nor agentPullSecrets (or sets them
// empty) hashes exactly as before the manager applied them, so that an
// upgraded manager does not reinstall every imported agent. The constants
// were recorded with the code before that change (same options and
// Clusters); a change of Options.Defaults moves them too.
func TestAgentConfigHashUnchangedWithoutScheduling(t *testing.T) {
	opts := Options{APIServerURL: "https://up:6443", APIServerCA: []byte("ca"), AgentImage: "ghcr.io/fleetgo/fleet-agent:v1"}
	opts.Defaults()
	hostNetwork := true
	minimal := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws", Labels: map[string]string{"env": "dev"}},
		Spec: fleet.ClusterSpec{ClientID: "id", KubeConfigSecret: "kc"}}
	full := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws"},
		Spec: fleet.ClusterSpec{ClientID: "id", KubeConfigSecret: "kc", AgentNamespace: "agent-ns", PrivateRepoURL: "mirror.local",
			AgentEnvVars:     []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "http://proxy:3128"}},
			AgentTolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
			AgentAffinity:    &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}},
			AgentResources:   &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
			HostNetwork:      &hostNetwork}}
	const (
		minimalHash = "37f97006da7e99e740ca1fe0dc8c61322404fc51bfb9e68cb9018361156d1aa3"
		fullHash    = "a16cbc5dbbf98d15d417cdf3ba11b280dfd484ef3441e39c6dd65f9b80b01186"
	)
	empty := func(c *fleet.Cluster) *fleet.Cluster {
		c = c.DeepCopy()
		c.Spec.AgentSchedulingCustomization = &fleet.AgentSchedulingCustomization{}
		c.Spec.AgentPullSecrets = &[]corev1.LocalObjectReference{}
		return c
	}
	r := &ClusterReconciler{reconcilerBase: reconcilerBase{Opts: opts}}
	for _, tc := range []struct {
		name    string
		cluster *fleet.Cluster
		want    string
	}{
		{name: "minimal", cluster: minimal, want: minimalHash},
		{name: "every other agent setting", cluster: full, want: fullHash},
		{name: "minimal, empty customization and pull secrets", cluster: empty(minimal), want: minimalHash},
		{name: "every other setting, empty customization and pull secrets", cluster: empty(full), want: fullHash},
	} {
		got, err := r.agentConfigHash(tc.cluster)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s: agentConfigHash %s, want %s as before: every such imported agent would be reinstalled on upgrade", tc.name, got, tc.want)
		}
	}

	// Each part of the customization moves the hash, so that its edit
	// reinstalls the agent.
	base, err := r.agentConfigHash(minimal)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{"none": base}
	for name, sc := range map[string]func(*fleet.ClusterSpec){
		"priorityClass":       func(s *fleet.ClusterSpec) { s.AgentSchedulingCustomization = schedulingOf(1000, nil, nil) },
		"priorityClass value": func(s *fleet.ClusterSpec) { s.AgentSchedulingCustomization = schedulingOf(2000, nil, nil) },
		"podDisruptionBudget {}": func(s *fleet.ClusterSpec) {
			s.AgentSchedulingCustomization = schedulingOf(-1, &fleet.PodDisruptionBudgetSpec{}, nil)
		},
		"podDisruptionBudget min": func(s *fleet.ClusterSpec) {
			s.AgentSchedulingCustomization = schedulingOf(-1, &fleet.PodDisruptionBudgetSpec{MinAvailable: "1"}, nil)
		},
		"agentPullSecrets": func(s *fleet.ClusterSpec) { s.AgentPullSecrets = &[]corev1.LocalObjectReference{{Name: "regcred"}} },
	} {
		c := minimal.DeepCopy()
		sc(&c.Spec)
		h, err := r.agentConfigHash(c)
		if err != nil {
			t.Fatal(err)
		}
		for other, oh := range seen {
			if h == oh {
				t.Errorf("%s hashes like %s: its edit would not reinstall the agent", name, other)
			}
		}
		seen[name] = h
	}
}

// schedulingOf is a customization with a priority class of value (none
// when negative), pdb and preemption policy.
func schedulingOf(value int, pdb *fleet.PodDisruptionBudgetSpec, policy *corev1.PreemptionPolicy) *fleet.AgentSchedulingCustomization {
	sc := &fleet.AgentSchedulingCustomization{PodDisruptionBudget: pdb}
	if value >= 0 {
		sc.PriorityClass = &fleet.PriorityClassSpec{Value: value, PreemptionPolicy: policy}
	}
	return sc
}

// TestAgentPodDisruptionBudget: the PDB selects the agent in its
// namespace; minAvailable / maxUnavailable are counts or percentages,
// neither means maxUnavailable 0 (Rancher Fleet's default), and both, or
// a value that is not one, is bad input naming the field.
func TestAgentPodDisruptionBudget(t *testing.T) {
	i, pct := intstr.FromInt32, intstr.FromString
	for _, tc := range []struct {
		name         string
		spec         *fleet.PodDisruptionBudgetSpec
		min, max     *intstr.IntOrString
		wantErrField string
		wantErrText  string
	}{
		{name: "nil", spec: nil},
		{name: "neither", spec: &fleet.PodDisruptionBudgetSpec{}, max: ptr.To(i(0))},
		{name: "min count", spec: &fleet.PodDisruptionBudgetSpec{MinAvailable: "1"}, min: ptr.To(i(1))},
		{name: "min zero", spec: &fleet.PodDisruptionBudgetSpec{MinAvailable: "0"}, min: ptr.To(i(0))},
		{name: "max percent", spec: &fleet.PodDisruptionBudgetSpec{MaxUnavailable: "50%"}, max: ptr.To(pct("50%"))},
		{name: "max 100%", spec: &fleet.PodDisruptionBudgetSpec{MaxUnavailable: "100%"}, max: ptr.To(pct("100%"))},
		// Rancher Fleet's rule: a zero beside the other value is ignored;
		// two non-zero values are an error.
		{name: "both, max zero", spec: &fleet.PodDisruptionBudgetSpec{MinAvailable: "1", MaxUnavailable: "0"}, min: ptr.To(i(1))},
		{name: "both, min zero", spec: &fleet.PodDisruptionBudgetSpec{MinAvailable: "0", MaxUnavailable: "25%"}, max: ptr.To(pct("25%"))},
		{name: "both zero", spec: &fleet.PodDisruptionBudgetSpec{MinAvailable: "0%", MaxUnavailable: "0"}, max: ptr.To(i(0))},
		{name: "both", spec: &fleet.PodDisruptionBudgetSpec{MinAvailable: "1", MaxUnavailable: "2"},
			wantErrField: "spec.agentSchedulingCustomization.podDisruptionBudget", wantErrText: "both set"},
		{name: "word", spec: &fleet.PodDisruptionBudgetSpec{MinAvailable: "abc"},
			wantErrField: "spec.agentSchedulingCustomization.podDisruptionBudget.minAvailable", wantErrText: `"abc" is neither a count`},
		{name: "negative", spec: &fleet.PodDisruptionBudgetSpec{MaxUnavailable: "-1"},
			wantErrField: "spec.agentSchedulingCustomization.podDisruptionBudget.maxUnavailable", wantErrText: `"-1" is negative`},
		{name: "over 100%", spec: &fleet.PodDisruptionBudgetSpec{MinAvailable: "150%"},
			wantErrField: "spec.agentSchedulingCustomization.podDisruptionBudget.minAvailable", wantErrText: "more than 100%"},
		{name: "negative percent", spec: &fleet.PodDisruptionBudgetSpec{MinAvailable: "-5%"},
			wantErrField: "spec.agentSchedulingCustomization.podDisruptionBudget.minAvailable", wantErrText: "neither a count"},
		{name: "fraction", spec: &fleet.PodDisruptionBudgetSpec{MaxUnavailable: "1.5"},
			wantErrField: "spec.agentSchedulingCustomization.podDisruptionBudget.maxUnavailable", wantErrText: "neither a count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pdb, err := AgentPodDisruptionBudget("agent-ns", tc.spec)
			if tc.wantErrField != "" {
				var bad *AgentSpecError
				if !errors.As(err, &bad) || bad.Field != tc.wantErrField || !strings.Contains(err.Error(), tc.wantErrText) {
					t.Fatalf("error %v (%T), want an AgentSpecError on %s saying %q", err, err, tc.wantErrField, tc.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.spec == nil {
				if pdb != nil {
					t.Fatalf("PDB %+v for no spec", pdb)
				}
				return
			}
			want := &policyv1.PodDisruptionBudget{
				ObjectMeta: metav1.ObjectMeta{Name: AgentPodDisruptionBudgetName, Namespace: "agent-ns", Labels: map[string]string{AgentManagedByLabel: AgentManagedByValue}},
				Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: tc.min, MaxUnavailable: tc.max,
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fleet-agent"}}},
			}
			if !reflect.DeepEqual(pdb, want) {
				t.Errorf("PDB\n%+v\nwant\n%+v", pdb, want)
			}
		})
	}
}

// TestAgentPriorityClass: Rancher Fleet's PriorityClass for the agent;
// a value above what a user may give, or an unknown preemption policy, is
// bad input.
func TestAgentPriorityClass(t *testing.T) {
	never, bogus := corev1.PreemptNever, corev1.PreemptionPolicy("Sometimes")
	for _, tc := range []struct {
		name        string
		spec        *fleet.PriorityClassSpec
		want        *schedulingv1.PriorityClass
		wantErrText string
	}{
		{name: "nil"},
		{name: "value", spec: &fleet.PriorityClassSpec{Value: 1000}, want: priorityClass(1000, nil)},
		{name: "negative value", spec: &fleet.PriorityClassSpec{Value: -10}, want: priorityClass(-10, nil)},
		{name: "policy", spec: &fleet.PriorityClassSpec{Value: 1_000_000_000, PreemptionPolicy: &never}, want: priorityClass(1_000_000_000, &never)},
		{name: "system range", spec: &fleet.PriorityClassSpec{Value: 2_000_000_000}, wantErrText: "priorityClass.value: 2000000000 is out of range"},
		{name: "unknown policy", spec: &fleet.PriorityClassSpec{Value: 1, PreemptionPolicy: &bogus}, wantErrText: `preemptionPolicy: "Sometimes" is not one of`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc, err := AgentPriorityClass(tc.spec)
			if tc.wantErrText != "" {
				var bad *AgentSpecError
				if !errors.As(err, &bad) || !strings.Contains(err.Error(), tc.wantErrText) {
					t.Fatalf("error %v, want an AgentSpecError saying %q", err, tc.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(pc, tc.want) {
				t.Errorf("PriorityClass\n%+v\nwant\n%+v", pc, tc.want)
			}
		})
	}
}

func priorityClass(value int32, policy *corev1.PreemptionPolicy) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{
		ObjectMeta:       metav1.ObjectMeta{Name: "fleet-agent-priority-class", Labels: map[string]string{"app.kubernetes.io/managed-by": "fleet"}},
		Value:            value,
		PreemptionPolicy: policy,
		Description:      "Priority class for Fleet Agent",
	}
}

// TestAgentObjectsScheduling: the PriorityClass and PDB come before the
// Deployment (admission refuses a pod whose class is missing), whose pod
// names the class and the pull secrets; bad input fails AgentObjects.
func TestAgentObjectsScheduling(t *testing.T) {
	c := &fleet.Cluster{Spec: fleet.ClusterSpec{
		AgentSchedulingCustomization: schedulingOf(1000, &fleet.PodDisruptionBudgetSpec{MaxUnavailable: "1"}, nil),
		AgentPullSecrets:             &[]corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}},
	}}
	objs, err := AgentObjects(AgentManifest{Namespace: "agent-ns", Image: "img", Cluster: c})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		switch o := o.(type) {
		case *schedulingv1.PriorityClass:
			kinds = append(kinds, "PriorityClass")
		case *policyv1.PodDisruptionBudget:
			kinds = append(kinds, "PodDisruptionBudget")
		case *appsv1.Deployment:
			kinds = append(kinds, "Deployment")
			pod := o.Spec.Template.Spec
			if pod.PriorityClassName != AgentPriorityClassName {
				t.Errorf("priorityClassName %q", pod.PriorityClassName)
			}
			if want := []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}}; !reflect.DeepEqual(pod.ImagePullSecrets, want) {
				t.Errorf("imagePullSecrets %v, want %v", pod.ImagePullSecrets, want)
			}
		}
	}
	if want := []string{"PriorityClass", "PodDisruptionBudget", "Deployment"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("order %v, want %v", kinds, want)
	}

	c.Spec.AgentSchedulingCustomization.PodDisruptionBudget.MinAvailable = "1"
	if _, err := AgentObjects(AgentManifest{Namespace: "agent-ns", Image: "img", Cluster: c}); !errors.As(err, new(*AgentSpecError)) {
		t.Errorf("both minAvailable and maxUnavailable: error %v, want an AgentSpecError", err)
	}
}

// TestImportStopsOnBadScheduling: bad input ends the reconcile without an
// error and without a requeue, so that the rate limiter does not retry it
// (only an edit of the Cluster wakes it), records Imported=False with the
// reason, and creates no import token (nothing else is done). The envtest
// TestImportedAgentScheduling shows the same on a real API server; this
// only pins the reconcile's return.
func TestImportStopsOnBadScheduling(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(fleetscheme.Scheme).Build()
	opts := Options{APIServerURL: "https://up:6443", AgentImage: "img"}
	opts.Defaults()
	rec := events.NewFakeRecorder(4)
	r := &ClusterReconciler{reconcilerBase: reconcilerBase{Client: c, Reader: c, Opts: opts, Recorder: rec}}
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws", Generation: 3},
		Spec: fleet.ClusterSpec{ClientID: "id", KubeConfigSecret: "kc", AgentSchedulingCustomization: schedulingOf(-1,
			&fleet.PodDisruptionBudgetSpec{MinAvailable: "abc"}, nil)}}
	for i := range 2 {
		res, err := r.importCluster(context.Background(), cluster)
		if err != nil || res != (ctrl.Result{}) {
			t.Fatalf("attempt %d: result %+v, error %v; want neither (no retry of bad input)", i, res, err)
		}
	}
	cond := meta.FindStatusCondition(cluster.Status.Conditions, fleet.ConditionImported)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonInvalidAgentScheduling || cond.ObservedGeneration != 3 ||
		!strings.Contains(cond.Message, `podDisruptionBudget.minAvailable: "abc" is neither a count`) {
		t.Errorf("imported condition %+v", cond)
	}
	if n := len(rec.Events); n != 1 {
		t.Errorf("%d events for two looks at the same bad input, want 1", n)
	}
	var toks fleet.ClusterRegistrationTokenList
	if err := c.List(context.Background(), &toks); err != nil || len(toks.Items) != 0 {
		t.Errorf("import tokens %v, %v: bad input must stop before the import", toks.Items, err)
	}
}
