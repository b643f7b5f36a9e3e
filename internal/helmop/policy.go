package helmop

import (
	"context"
	"errors"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/policy"
	"github.com/fleetgo/fleet/internal/target"
)

// ReasonRestricted is the event reason of a HelmOp its namespace's
// Policies refuse: Rancher Fleet's HelmOp reconciler's reason, so that
// alerts written for it match.
const ReasonRestricted = "PolicyViolation"

// authorize checks the HelmOp against the Policies of its namespace before
// any Secret is read or repository contacted, so that the namespace's
// credentials never reach a repository or chart the Policies forbid. It
// returns the HelmOp to build: a copy with the Policies' helmOp defaults
// (serviceAccount, helmSecretName) filled in where the spec has none; the
// user's spec is never changed. A refusal is an *inputError wrapping a
// *target.PolicyError (see isRefused); other errors are transient.
func (r *Reconciler) authorize(ctx context.Context, op *fleet.HelmOp) (*fleet.HelmOp, error) {
	if !r.Opts.Policies.Served() {
		return op, nil
	}
	policies, err := policy.Read(ctx, r.Client, op.Namespace)
	if err != nil {
		return nil, err
	}
	granted, err := policies.AuthorizeHelmOp(&op.Spec)
	if err != nil {
		return nil, &inputError{err}
	}
	if granted.ServiceAccount == op.Spec.ServiceAccount && granted.SecretName == op.Spec.HelmSecretName {
		return op, nil
	}
	authorized := op.DeepCopy()
	authorized.Spec.ServiceAccount = granted.ServiceAccount
	authorized.Spec.HelmSecretName = granted.SecretName
	return authorized, nil
}

// isRefused says whether err is a refusal by the Policies: it stays until
// the HelmOp or a Policy changes, so it is not retried on a timer.
func isRefused(err error) bool {
	var pe *target.PolicyError
	return errors.As(err, &pe)
}

// policyStamp is what the Policies decided for a HelmOp: a build is due
// when it changes (a Policy was relaxed, tightened, or its defaults
// changed), whatever the backoff says.
func policyStamp(authorized *fleet.HelmOp, refusal error) string {
	if refusal != nil {
		return "refused: " + refusal.Error()
	}
	return "serviceAccount=" + authorized.Spec.ServiceAccount + "\x00helmSecretName=" + authorized.Spec.HelmSecretName
}

// policyHandler enqueues every HelmOp of a Policy's namespace, so that a
// Policy change takes effect at once: a refused HelmOp is built when
// allowed, one newly refused keeps its Bundle but is no longer built.
func (r *Reconciler) policyHandler() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(apply.AllInNamespace(r.Client, func() client.ObjectList { return &fleet.HelmOpList{} }))
}
