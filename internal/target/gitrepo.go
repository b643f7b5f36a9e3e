package target

import (
	"fmt"
	"slices"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// GitRepoAccess is what the GitRepoRestrictions of a namespace grant a
// GitRepo before anything is fetched for it.
type GitRepoAccess struct {
	// ClientSecretName is the GitRepo's clientSecretName or, when that is
	// empty, the restrictions' defaultClientSecretName (the first by
	// restriction name); "" when neither is set.
	ClientSecretName string
	allowedSecrets   []string
	defaultSecret    string
}

// SecretAllowed says whether the client Secret name may be used for the
// GitRepo: any name when no restriction lists allowedClientSecretNames,
// otherwise a listed one or the defaultClientSecretName.
func (a GitRepoAccess) SecretAllowed(name string) bool {
	return len(a.allowedSecrets) == 0 || name == a.defaultSecret || slices.Contains(a.allowedSecrets, name)
}

// AuthorizeGitRepo checks a GitRepo against the GitRepoRestrictions of its
// namespace (list), as Rancher Fleet's AuthorizeAndAssignDefaults does
// before any clone, so that the namespace's credentials are never sent to a
// repository the restrictions forbid. The restrictions are combined by the
// same rules the Bundle targeting uses (aggregate): allowed lists are
// united, the first default by restriction name wins. It refuses a repo
// that matches no allowedRepoPatterns, a clientSecretName or serviceAccount
// (the default applied) that is not allowed, and, when
// allowedTargetNamespaces is set, a targetNamespace that is not in it (an
// empty one included, as in Fleet). The Bundles are checked again when they
// are targeted.
func AuthorizeGitRepo(list []*fleet.GitRepoRestriction, spec *fleet.GitRepoSpec) (GitRepoAccess, error) {
	access := GitRepoAccess{ClientSecretName: spec.ClientSecretName}
	if len(list) == 0 {
		return access, nil
	}
	r, err := aggregate(list)
	if err != nil {
		return access, err
	}
	access.allowedSecrets, access.defaultSecret = r.allowedSecrets, r.defaultSecret
	if access.ClientSecretName == "" {
		access.ClientSecretName = r.defaultSecret
	}
	if err := r.checkRepo(spec.Repo); err != nil {
		return access, err
	}
	if name := access.ClientSecretName; name != "" && !access.SecretAllowed(name) {
		return access, fmt.Errorf("clientSecretName %q is not allowed by the GitRepoRestrictions of this namespace", name)
	}
	sa := spec.ServiceAccount
	if sa == "" {
		sa = r.defaultSA
	}
	// An empty one is left to the Bundles: a fleet.yaml may name one.
	if sa != "" && len(r.allowedSAs) > 0 && !slices.Contains(r.allowedSAs, sa) {
		return access, fmt.Errorf("serviceAccount %q is not allowed by the GitRepoRestrictions of this namespace", sa)
	}
	if len(r.namespaces) > 0 && !slices.Contains(r.namespaces, spec.TargetNamespace) {
		if spec.TargetNamespace == "" {
			return access, fmt.Errorf("targetNamespace must be set: the GitRepoRestrictions of this namespace allow only %v", r.namespaces)
		}
		return access, fmt.Errorf("target namespace %q is not allowed by the GitRepoRestrictions of this namespace", spec.TargetNamespace)
	}
	return access, nil
}
