package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

const tokenStatusRefused = "token status writes refused for this test"

// refuseTokenStatus makes the API server refuse the manager's status
// writes of the ClusterRegistrationTokens of ws, so that no token there gets
// its values, until the test ends. It returns once the refusal is in force,
// probed with probe, a token of ws.
func refuseTokenStatus(t *testing.T, c client.Client, ws string, probe *fleet.ClusterRegistrationToken) {
	t.Helper()
	ctx := context.Background()
	name := "refuse-token-status-" + ws
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{fleet.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"clusterregistrationtokens/status"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: fmt.Sprintf("request.namespace != '%s'", ws), Message: tokenStatusRefused}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), binding)
		_ = c.Delete(context.Background(), policy)
	})
	if err := c.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() error {
		p := &fleet.ClusterRegistrationToken{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(probe), p); err != nil {
			return err
		}
		p.Status.SecretName = "probe"
		err := c.Status().Update(ctx, p, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), tokenStatusRefused) {
			return fmt.Errorf("refusal not in force yet (%v)", err)
		}
		return nil
	})
}

// TestAgentTokenStopsWhenTokenDeleted: when the token disappears while the
// command waits for its values (the manager deletes a token without TTL
// when it requires one, and an expired one), the command fails at once,
// saying so and where to look, rather than waiting for --timeout and then
// blaming fleet-controller. Here the manager cannot issue values (its status
// writes are refused) and the test deletes the token, as the manager would.
func TestAgentTokenStopsWhenTokenDeleted(t *testing.T) {
	env := startManager(t)
	ws := newWorkspace(t, env, "token-gone")
	ctx := context.Background()
	probe := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ws}}
	refuseTokenStatus(t, env.Client, ws, probe)

	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	root := NewRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"--kubeconfig", env.Kubeconfig, "-n", ws, "install", "agent-token", "--ttl", "0", "--timeout", "2m"})
	go func() {
		err := root.Execute()
		done <- result{out: out.String(), err: err}
	}()

	var token *fleet.ClusterRegistrationToken
	eventually(t, time.Minute, func() error {
		list := &fleet.ClusterRegistrationTokenList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ws)); err != nil {
			return err
		}
		for i := range list.Items {
			if list.Items[i].Name != probe.Name {
				token = &list.Items[i]
				return nil
			}
		}
		return fmt.Errorf("the command created no token yet")
	})
	if token.Status.SecretName != "" {
		t.Fatalf("token %s got its values despite the refusal", token.Name)
	}
	if err := env.Client.Delete(ctx, token); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	var res result
	select {
	case res = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the command did not return")
	}
	for _, want := range []string{
		"ClusterRegistrationToken " + ws + "/" + token.Name + " was deleted before the manager issued its values",
		"registrationTokenTTL.required", "--ttl", "expired",
		"kubectl -n " + ws + " get events --field-selector involvedObject.name=" + token.Name,
	} {
		if res.err == nil || !strings.Contains(res.err.Error(), want) {
			t.Errorf("error %v, want it to contain %q", res.err, want)
		}
	}
	if res.err != nil && strings.Contains(res.err.Error(), "is fleet-controller running") {
		t.Errorf("error blames fleet-controller: %v", res.err)
	}
	if res.out != "" {
		t.Errorf("printed %q despite the error", res.out)
	}
}
