package controller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// restrictedError is a GitRepo its namespace's GitRepoRestrictions refuse:
// nothing may be fetched for it until the GitRepo or the restrictions
// change, so it is not retried on a timer.
type restrictedError struct{ err error }

func (e *restrictedError) Error() string { return e.err.Error() }
func (e *restrictedError) Unwrap() error { return e.err }

// authorize checks the GitRepo against the GitRepoRestrictions of its
// namespace before anything is fetched, so that the namespace's
// credentials never reach a repository, and no deployment is made with a
// service account or target namespace, that the restrictions forbid. It
// returns the GitRepo to build the remote from: a copy with the
// restrictions' defaultClientSecretName filled in when the spec names no
// client Secret (the user's spec is never changed). A refusal is a
// *restrictedError; other errors (reading the restrictions or the Secret)
// are transient.
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
	if access.ClientSecretName == "" && !access.SecretAllowed(DefaultClientSecretName) {
		// Without a name the remote would use the Secret gitcredential
		// when it exists: it must be allowed like any other. Rancher Fleet
		// does not check this case.
		_, err := getSecret(ctx, r.APIReader, repo.Namespace, DefaultClientSecretName)
		switch {
		case err == nil:
			return nil, &restrictedError{fmt.Errorf("clientSecretName is empty and Secret %q, used by default, is not allowed by the GitRepoRestrictions of this namespace", DefaultClientSecretName)}
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading client secret: %w", err)
		}
	}
	if access.ClientSecretName == repo.Spec.ClientSecretName {
		return repo, nil
	}
	authorized := repo.DeepCopy()
	authorized.Spec.ClientSecretName = access.ClientSecretName
	return authorized, nil
}

func isRestricted(err error) bool {
	var re *restrictedError
	return errors.As(err, &re)
}

// restrictionHandler enqueues every GitRepo of a GitRepoRestriction's
// namespace: a refused GitRepo is checked again (and synced at once) when
// the restrictions change, and one they newly forbid stops being fetched.
func (r *Reconciler) restrictionHandler() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var repos fleet.GitRepoList
		if err := r.Client.List(ctx, &repos, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(repos.Items))
		for i := range repos.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&repos.Items[i])})
		}
		return out
	})
}
