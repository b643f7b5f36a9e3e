package fleettest

import (
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Denial describes a ValidatingAdmissionPolicy that refuses writes to a
// Fleet resource, the way a policy engine or a quota refuses them, so that
// tests can make the real API server fail a controller's write.
type Denial struct {
	// Name of the policy and of its binding (cluster-scoped).
	Name string
	// Operation refused (Create, Update, ...).
	Operation admissionv1.OperationType
	// Resource of group fleet.cattle.io, e.g. "bundledeployments" or
	// "gitrepos/status".
	Resource string
	// Allow is the CEL expression that lets a write through; the others
	// are refused with Message.
	Allow, Message string
}

// Objects returns the policy and its binding, to create (and delete) in
// this order. The API server enforces them once its informer has them:
// probe with a dry-run write before relying on it.
func (d Denial) Objects() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{d.Operation},
					Rule: admissionv1.Rule{APIGroups: []string{fleet.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{d.Resource}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: d.Allow, Message: d.Message}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: d.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	return policy, binding
}
