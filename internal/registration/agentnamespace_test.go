package registration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
)

// TestAgentNamespaceMove imports down[1] into one agent namespace, then
// moves spec.agentNamespace: the agent is installed in the new namespace
// at once, even while the downstream API server refuses to delete the old
// agent's Deployment (the Cluster says so, Imported stays True, and the
// old namespace stays recorded); once it allows it, the retry removes the
// agent objects the manager made in the old namespace, and only those:
// the namespace, the agent's own Secret and a ConfigMap of someone else
// stay.
func TestAgentNamespaceMove(t *testing.T) {
	ctx := context.Background()
	d := down[1]
	const oldNS, newNS = "move-old", "move-new"
	createKubeconfigSecret(t, d, workspace, "move-kubeconfig")
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "move", Namespace: workspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "move-kubeconfig", AgentNamespace: oldNS}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	waitImported(t, cluster)
	agentDeployment(t, d, oldNS)
	waitDeployedNamespace(t, cluster, oldNS)
	// What the agent writes itself, and what a user keeps there.
	others := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: oldNS}, StringData: map[string]string{"kubeconfig": "x"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team-settings", Namespace: oldNS}, Data: map[string]string{"a": "b"}},
	}
	for _, o := range others {
		if err := d.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	refuseDeletes(t, d, oldNS)
	editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.AgentNamespace = newNS })
	eventually(t, "new agent installed, old one not removed yet", func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != registration.ReasonAgentRemovalFailed ||
			!strings.Contains(cond.Message, "namespace "+oldNS) || !strings.Contains(cond.Message, "refused for this test") {
			return fmt.Errorf("imported condition %+v", cond)
		}
		if c.Status.AgentDeployedNamespace != oldNS {
			return fmt.Errorf("status.agentDeployedNamespace %q while the old agent is there, want %q", c.Status.AgentDeployedNamespace, oldNS)
		}
		return nil
	})
	agentDeployment(t, d, newNS)
	agentDeployment(t, d, oldNS)
	waitEvent(t, up, workspace, registration.ReasonAgentRemovalFailed, "namespace "+oldNS)

	allowDeletes(t, d)
	waitDeployedNamespace(t, cluster, newNS)
	waitImportedAt(t, cluster)
	for _, o := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: oldNS}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: oldNS}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-bootstrap", Namespace: oldNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: oldNS}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: oldNS + "-fleet-agent-role"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: oldNS + "-fleet-agent-role-binding"}},
	} {
		if err := d.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("old agent's %T %s: want it deleted, got %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	for _, o := range append(others, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: oldNS}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: newNS + "-fleet-agent-role"}}) {
		if err := d.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("%T %s the manager did not make, or the new agent's: %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	if ns := (&corev1.Namespace{}); d.Client.Get(ctx, client.ObjectKey{Name: oldNS}, ns) == nil && !ns.DeletionTimestamp.IsZero() {
		t.Errorf("namespace %s is being deleted", oldNS)
	}
	agentDeployment(t, d, newNS)
	waitEvent(t, up, workspace, registration.ReasonAgentRemoved, "namespace "+oldNS)
}

// waitDeployedNamespace waits until cluster records ns as the namespace
// of the agent the manager installed.
func waitDeployedNamespace(t *testing.T, cluster *fleet.Cluster, ns string) {
	t.Helper()
	eventually(t, "status.agentDeployedNamespace "+ns, func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		if c.Status.AgentDeployedNamespace != ns {
			return fmt.Errorf("status.agentDeployedNamespace %q", c.Status.AgentDeployedNamespace)
		}
		return nil
	})
}

// deleteRefusal names the policy refuseDeletes creates.
const deleteRefusal = "refuse-agent-deletes"

// refuseDeletes makes d's API server refuse to delete Deployments in ns,
// as a policy engine would, and returns once the refusal is in force.
func refuseDeletes(t *testing.T, d *testenv.Cluster, ns string) {
	t.Helper()
	ctx := context.Background()
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: deleteRefusal},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Delete},
					Rule:       admissionv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"*"}, Resources: []string{"deployments"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: fmt.Sprintf("request.namespace != '%s'", ns), Message: "deletes refused for this test"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: deleteRefusal},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: deleteRefusal,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := d.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { allowDeletes(t, d) })
	eventually(t, "delete refusal in force", func() error {
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns}}
		err := d.Client.Delete(ctx, dep, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "refused for this test") {
			return fmt.Errorf("policy not in force yet (%v)", err)
		}
		return nil
	})
}

// allowDeletes removes the refusal of refuseDeletes.
func allowDeletes(t *testing.T, d *testenv.Cluster) {
	t.Helper()
	for _, o := range []client.Object{
		&admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: deleteRefusal}},
		&admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: deleteRefusal}},
	} {
		if err := d.Client.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
}
