package schedule_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/schedule"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// setFlags writes a cluster's flags as another writer (Rancher Fleet, an
// earlier run) would have left them.
func setFlags(t *testing.T, ns, name string, f schedule.Flags) {
	t.Helper()
	patch := fmt.Sprintf(`{"status":{"scheduled":%t,"activeSchedule":%t}}`, f.Scheduled, f.Active)
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := env.Client.Status().Patch(context.Background(), c, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

func expectGone(t *testing.T, obj client.Object) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s still there (finalizers %v): %v", obj.GetName(), obj.GetFinalizers(), err)
	})
}

// TestValidScheduleBesideInvalidOne: a cluster that an invalid Schedule
// matched while it was valid still follows a valid Schedule that targets
// it: its window opens there; once that one is deleted, the cluster
// stays as it is (the invalid Schedule still freezes it: clearing it would
// deploy outside that Schedule's windows) until the invalid one goes too.
func TestValidScheduleBesideInvalidOne(t *testing.T) {
	ns := newNamespace(t, "beside")
	createCluster(t, ns, "dev", map[string]string{"env": "dev"})
	night := createSchedule(t, ns, "night", "0 0 3 * * *", time.Hour, "UTC", byLabel("env", "dev"))
	expectFlags(t, ns, "dev", inactive)
	expectStatus(t, ns, "night", matching("dev"))

	update(t, night, func() { night.Spec.Schedule = "0 0 3 * *" })
	expectStatus(t, ns, "night", func(st fleet.ScheduleStatus) error {
		if c := schedule.FindCondition(st.Conditions, fleet.ConditionReady); c == nil || c.Reason != schedule.ReasonInvalidSchedule {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	noon := createSchedule(t, ns, "noon", "0 0 12 * * *", time.Hour, "UTC", byLabel("env", "dev"))
	expectFlags(t, ns, "dev", active)
	expectStatus(t, ns, "noon", matching("dev"))

	// Deleted, noon releases nothing the invalid Schedule still lists.
	if err := env.Client.Delete(context.Background(), noon); err != nil {
		t.Fatal(err)
	}
	expectGone(t, noon)
	fleettest.Consistently(t, 3*time.Second, func() error {
		if got, err := flagsOf(ns, "dev"); err != nil || got != active {
			return fmt.Errorf("cluster dev: %+v (%v), want it frozen at %+v", got, err, active)
		}
		return nil
	})

	if err := env.Client.Delete(context.Background(), night); err != nil {
		t.Fatal(err)
	}
	expectGone(t, night)
	expectFlags(t, ns, "dev", none)
}

// TestStrayFlagsAreCleared: flags no Schedule of the namespace accounts
// for (Rancher Fleet's, or left by a Schedule removed without this
// controller) are cleared, also in a namespace without any Schedule.
func TestStrayFlagsAreCleared(t *testing.T) {
	ns := newNamespace(t, "stray")
	createCluster(t, ns, "dev", nil)
	setFlags(t, ns, "dev", inactive)
	expectFlags(t, ns, "dev", none)
}

// denyStatusWrites makes the API server refuse every status write to
// cluster name of ns, as an admission policy or a webhook might; the
// returned func lifts the refusal.
func denyStatusWrites(t *testing.T, ns, name string) (lift func()) {
	t.Helper()
	ctx := context.Background()
	fail := admissionv1.Fail
	policy := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-" + ns},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"fleet.cattle.io"}, APIVersions: []string{"*"}, Resources: []string{"clusters/status"}},
				}}},
			},
			Validations: []admissionv1.Validation{{Expression: fmt.Sprintf("object.metadata.name != %q", name), Message: "status writes refused"}},
		}}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "deny-" + ns},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
	lift = func() {
		for _, o := range []client.Object{binding, policy} {
			_ = env.Client.Delete(ctx, o)
		}
	}
	for _, o := range []client.Object{policy, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(lift)
	// The policy takes effect once the API server has compiled it.
	fleettest.Eventually(t, timeout, func() error {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		err := env.Client.Status().Patch(ctx, c, client.RawPatch(types.MergePatchType, []byte(`{"status":{"display":{"state":"probe"}}}`)))
		if err == nil {
			return fmt.Errorf("status write to %s still accepted", name)
		}
		return nil
	})
	return lift
}

// TestFailedClusterWriteHoldsOnlyItsOwn: a cluster whose status cannot be
// written does not stop the namespace: the other clusters get their
// flags, the Schedules their status, and a deleted Schedule that does not
// target it is released. A deleted Schedule that targets it keeps its
// finalizer (and the cluster its flags) until the write goes through.
func TestFailedClusterWriteHoldsOnlyItsOwn(t *testing.T) {
	ns := newNamespace(t, "stuck")
	createCluster(t, ns, "a-stuck", map[string]string{"env": "stuck"})
	createCluster(t, ns, "b-ok", map[string]string{"env": "ok"})
	stuck := createSchedule(t, ns, "stuck", "0 0 12 * * *", time.Hour, "UTC", byLabel("env", "stuck"))
	expectFlags(t, ns, "a-stuck", active)
	expectStatus(t, ns, "stuck", matching("a-stuck"))
	lift := denyStatusWrites(t, ns, "a-stuck")

	ok := createSchedule(t, ns, "ok", "0 0 12 * * *", time.Hour, "UTC", byLabel("env", "ok"))
	expectFlags(t, ns, "b-ok", active)
	expectStatus(t, ns, "ok", matching("b-ok"))

	if err := env.Client.Delete(context.Background(), ok); err != nil {
		t.Fatal(err)
	}
	expectGone(t, ok)
	expectFlags(t, ns, "b-ok", none)

	if err := env.Client.Delete(context.Background(), stuck); err != nil {
		t.Fatal(err)
	}
	// Long enough for several refused passes.
	time.Sleep(3 * time.Second)
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(stuck), stuck); err != nil || !slices.Contains(stuck.Finalizers, schedule.Finalizer) {
		t.Errorf("deleted Schedule whose cluster cannot be written: finalizers %v, err %v; want it kept", stuck.Finalizers, err)
	}
	if got, err := flagsOf(ns, "a-stuck"); err != nil || got != active {
		t.Errorf("refused cluster: %+v %v", got, err)
	}
	lift()
	expectGone(t, stuck)
	expectFlags(t, ns, "a-stuck", none)
}

// TestFinalizerKeepsTheAppliedSpec: adding the finalizer leaves a
// GitOps-applied spec as written (duration 2h stays "2h") and its
// generation unchanged.
func TestFinalizerKeepsTheAppliedSpec(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "applied")
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(`
apiVersion: fleet.cattle.io/v1alpha1
kind: Schedule
metadata:
  name: nightly
spec:
  schedule: "0 0 22 * * *"
  duration: 2h
  location: UTC
  targets:
    clusters:
    - clusterName: dev
`), &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetNamespace(ns)
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, ns, "nightly", func(fleet.ScheduleStatus) error { return nil })
	fleettest.Eventually(t, timeout, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return err
		}
		if len(u.GetFinalizers()) == 0 {
			return fmt.Errorf("no finalizer yet")
		}
		return nil
	})
	d, _, _ := unstructured.NestedString(u.Object, "spec", "duration")
	if d != "2h" || u.GetGeneration() != 1 {
		t.Errorf("after the finalizer: spec.duration %q, generation %d; want \"2h\", 1", d, u.GetGeneration())
	}
}

// TestRancherConditionsStayWritable: a Schedule whose status Rancher
// Fleet wrote (wrangler conditions: no reason, message or
// lastTransitionTime) can be stored, and its metadata updated.
func TestRancherConditionsStayWritable(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "rancher")
	s := createSchedule(t, ns, "nightly", "0 0 22 * * *", time.Hour, "UTC", byLabel("env", "dev"))
	// Retried until the label update lands on the Rancher-shaped status,
	// not on one the controller wrote in between (on a loaded machine the
	// controller may win several times in a row).
	backoff := wait.Backoff{Steps: 50, Duration: 10 * time.Millisecond, Factor: 1, Jitter: 1}
	err := retry.RetryOnConflict(backoff, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		s.Status.Conditions = []fleet.ScheduleCondition{
			{Type: "Ready", Status: metav1.ConditionTrue, LastUpdateTime: "2030-06-15T12:00:00Z"},
			{Type: "Reconciling", Status: metav1.ConditionFalse, LastUpdateTime: "2030-06-15T12:00:00Z"},
		}
		if err := env.Client.Status().Update(ctx, s); err != nil {
			return err
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{"team":"a"},"resourceVersion":%q}}`, s.ResourceVersion)
		return env.Client.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(patch)))
	})
	if err != nil {
		t.Fatalf("a Rancher-shaped status: %v", err)
	}
	if s.Labels["team"] != "a" {
		t.Errorf("labels %v", s.Labels)
	}
}
