package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/policy"
	"github.com/fleetgo/fleet/internal/target"
)

// restrictedError is a GitRepo its namespace's GitRepoRestrictions or
// Policies refuse: nothing may be fetched for it until the GitRepo, the
// restrictions or the Policies change, so it is not retried on a timer.
type restrictedError struct{ err error }

func (e *restrictedError) Error() string { return e.err.Error() }
func (e *restrictedError) Unwrap() error { return e.err }

// authorize checks the GitRepo against the GitRepoRestrictions and the
// Policies of its namespace before anything is fetched, so that the
// namespace's credentials never reach a repository, and no deployment is
// made with a service account or target namespace, that they forbid. It
// returns the GitRepo to build the remote from: a copy with the defaults
// filled in (the restrictions' defaultClientSecretName, else the Policies'
// gitRepo.defaultClientSecretName, when the spec names no client Secret;
// with Policies, their gitRepo.defaultServiceAccount). The user's spec is
// never changed. A refusal is a *restrictedError; other errors (reading
// the restrictions, the Policies or the Secret) are transient.
//
// repo itself is the reconcile's working copy, read for this reconcile and
// never written back (only its status is patched, from the copy Reconcile
// took before): its serviceAccount is set to the granted one, because the
// Bundles are built from it.
func (r *Reconciler) authorize(ctx context.Context, repo *fleet.GitRepo) (*fleet.GitRepo, error) {
	var list fleet.GitRepoRestrictionList
	if err := r.Client.List(ctx, &list, client.InNamespace(repo.Namespace)); err != nil {
		return nil, fmt.Errorf("reading GitRepoRestrictions: %w", err)
	}
	restrictions := make([]*fleet.GitRepoRestriction, len(list.Items))
	for i := range list.Items {
		restrictions[i] = &list.Items[i]
	}
	access, err := target.AuthorizeGitRepo(restrictions, &repo.Spec)
	if err != nil {
		return nil, &restrictedError{err}
	}
	policies := target.CombinePolicies(nil)
	if r.Opts.Policies.Served() {
		if policies, err = policy.Read(ctx, r.Client, repo.Namespace); err != nil {
			return nil, err
		}
	}
	// The Policies see the GitRepo as the restrictions leave it: the
	// restrictions' defaults come first, as in Rancher Fleet.
	checked := repo.Spec
	checked.ClientSecretName = access.ClientSecretName
	if checked.ServiceAccount == "" && !policies.Empty() {
		checked.ServiceAccount = restrictionsDefaultSA(list.Items)
	}
	granted, err := policies.AuthorizeGitRepo(&checked)
	if err != nil {
		return nil, &restrictedError{err}
	}
	if name := granted.SecretName; name != access.ClientSecretName && !access.SecretAllowed(name) {
		// A Policy's default must pass the restrictions too.
		return nil, &restrictedError{fmt.Errorf("clientSecretName %q, the default of the Policies, is not allowed by the GitRepoRestrictions of this namespace", name)}
	}
	if granted.SecretName == "" {
		if err := r.checkImplicitSecret(ctx, repo.Namespace, access, policies); err != nil {
			return nil, err
		}
	}
	if granted.SecretName == repo.Spec.ClientSecretName && granted.ServiceAccount == repo.Spec.ServiceAccount {
		return repo, nil
	}
	repo.Spec.ServiceAccount = granted.ServiceAccount
	authorized := repo.DeepCopy()
	authorized.Spec.ClientSecretName = granted.SecretName
	return authorized, nil
}

// checkImplicitSecret refuses a GitRepo that names no client Secret when
// the Secret gitcredential, which the remote would then use, exists and is
// not allowed by the restrictions or the Policies. Rancher Fleet does not
// check this case.
func (r *Reconciler) checkImplicitSecret(ctx context.Context, ns string, access target.GitRepoAccess, policies *target.PolicySet) error {
	var refusal error
	switch {
	case !access.SecretAllowed(DefaultClientSecretName):
		refusal = fmt.Errorf("clientSecretName is empty and Secret %q, used by default, is not allowed by the GitRepoRestrictions of this namespace", DefaultClientSecretName)
	case policies.CheckClientSecret(DefaultClientSecretName) != nil:
		refusal = fmt.Errorf("clientSecretName is empty and Secret %q, used by default, is not allowed: %w", DefaultClientSecretName, policies.CheckClientSecret(DefaultClientSecretName))
	default:
		return nil
	}
	_, err := getSecret(ctx, r.APIReader, ns, DefaultClientSecretName)
	switch {
	case err == nil:
		return &restrictedError{refusal}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading client secret: %w", err)
	}
	return nil
}

// restrictionsDefaultSA is the defaultServiceAccount the GitRepoRestrictions
// apply (the first by name), which the Bundle targeting fills in.
func restrictionsDefaultSA(list []fleet.GitRepoRestriction) string {
	sorted := slices.Clone(list)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, x := range sorted {
		if x.DefaultServiceAccount != "" {
			return x.DefaultServiceAccount
		}
	}
	return ""
}

func isRestricted(err error) bool {
	var re *restrictedError
	return errors.As(err, &re)
}

// restrictionHandler enqueues every GitRepo of a GitRepoRestriction's or a
// Policy's namespace: a refused GitRepo is checked again (and synced at
// once) when the restrictions or Policies change, and one they newly forbid
// stops being fetched.
func (r *Reconciler) restrictionHandler() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(apply.AllInNamespace(r.Client, func() client.ObjectList { return &fleet.GitRepoList{} }))
}
