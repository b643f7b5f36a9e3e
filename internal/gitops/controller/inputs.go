package controller

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/bundlereader"
	"github.com/fleetgo/fleet/internal/gitops/git"
)

// DefaultClientSecretName is used when clientSecretName is empty and a
// Secret of this name exists in the GitRepo's namespace (as in Fleet).
const DefaultClientSecretName = "gitcredential"

// helmKeyPathsSecret is the key of the helmSecretNameForPaths Secret
// (Fleet's name).
const helmKeyPathsSecret = "secrets-path.yaml"

// inputError is bad user input (a missing or malformed Secret): retrying
// without a change will not help, so the GitRepo is marked Stalled.
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

func getSecret(ctx context.Context, r client.Reader, ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		return nil, err
	}
	return s, nil
}

// remoteFor builds the git remote of a GitRepo, reading its client Secret.
func remoteFor(ctx context.Context, r client.Reader, repo *fleet.GitRepo, opts Options) (git.Remote, error) {
	rem := git.Remote{
		URL:             repo.Spec.Repo,
		Branch:          repo.Spec.Branch,
		Revision:        repo.Spec.Revision,
		CABundle:        repo.Spec.CABundle,
		InsecureSkipTLS: repo.Spec.InsecureSkipTLSverify,
		Timeout:         opts.GitTimeout,
	}
	name := repo.Spec.ClientSecretName
	s, err := getSecret(ctx, r, repo.Namespace, orDefault(name, DefaultClientSecretName))
	switch {
	case apierrors.IsNotFound(err) && name == "":
		return rem, nil
	case apierrors.IsNotFound(err):
		return rem, &inputError{fmt.Errorf("client secret %q not found", name)}
	case err != nil:
		return rem, fmt.Errorf("reading client secret: %w", err)
	}
	rem.Credentials = git.CredentialsFromSecret(s)
	if git.IsSSH(rem.URL) && len(rem.Credentials.KnownHosts) == 0 {
		// As in Fleet: without known_hosts in the Secret, the manager's
		// known-hosts ConfigMap (the public git hosts' keys and the
		// chart's additionalKnownHosts) verifies the server.
		kh, err := git.ReadKnownHostsConfigMap(ctx, r, opts.SystemNamespace)
		if err != nil {
			return rem, err
		}
		rem.Credentials.KnownHosts = kh
	}
	return rem, nil
}

// helmPathAuth is one entry of the helmSecretNameForPaths Secret.
type helmPathAuth struct {
	Username           string `json:"username,omitempty"`
	Password           string `json:"password,omitempty"`
	CABundle           []byte `json:"caBundle,omitempty"`
	SSHPrivateKey      []byte `json:"sshPrivateKey,omitempty"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
	BasicHTTP          bool   `json:"basicHTTP,omitempty"`
}

// helmAuth reads helmSecretName or helmSecretNameForPaths. As in Rancher
// Fleet, helmSecretName is ignored when helmSecretNameForPaths is set: a
// path that Secret lists (exactly or by a glob) gets its entry, any other
// path no credentials, rather than the repository-wide ones the per-path
// Secret was meant to replace. git:: chart sources over SSH are verified
// against the helm secret's known_hosts or, without one, clientKnownHosts:
// the known_hosts the GitRepo's own SSH clone is verified against (its
// client Secret's, else the known-hosts ConfigMap's), else, for a GitRepo
// cloned over HTTP(S) or with no client Secret, the known-hosts ConfigMap
// of systemNamespace, as in Rancher Fleet. The ConfigMap is read only when
// an SSH key is set, since without one no SSH chart source can be read.
// The host key policy (strict, or off with the manager's
// insecureSkipHostKeyChecks) is the git client's, the same as the clone's.
func helmAuth(ctx context.Context, r client.Reader, repo *fleet.GitRepo, clientKnownHosts []byte, systemNamespace string) (bundlereader.HelmAuth, map[string]bundlereader.HelmAuth, error) {
	var auth bundlereader.HelmAuth
	if name := repo.Spec.HelmSecretName; name != "" && repo.Spec.HelmSecretNameForPaths == "" {
		s, err := getSecret(ctx, r, repo.Namespace, name)
		if apierrors.IsNotFound(err) {
			return auth, nil, &inputError{fmt.Errorf("helm secret %q not found", name)}
		}
		if err != nil {
			return auth, nil, fmt.Errorf("reading helm secret: %w", err)
		}
		auth = bundlereader.HelmAuthFromSecret(s.Data)
	}
	if len(auth.CABundle) == 0 {
		auth.CABundle = repo.Spec.CABundle
	}
	// As in Rancher Fleet, the GitRepo's insecureSkipTLSVerify also skips
	// TLS verification for chart repositories, registries and git:: chart
	// sources, with or without a helm Secret. A path that matches an
	// entry of helmSecretNameForPaths uses that entry's setting alone.
	auth.InsecureSkipTLS = auth.InsecureSkipTLS || repo.Spec.InsecureSkipTLSverify
	if len(auth.SSHKnownHosts) == 0 {
		auth.SSHKnownHosts = clientKnownHosts
	}
	name := repo.Spec.HelmSecretNameForPaths
	if name == "" {
		return auth, nil, configMapKnownHosts(ctx, r, &auth, nil, systemNamespace)
	}
	s, err := getSecret(ctx, r, repo.Namespace, name)
	if apierrors.IsNotFound(err) {
		return auth, nil, &inputError{fmt.Errorf("helm secret for paths %q not found", name)}
	}
	if err != nil {
		return auth, nil, fmt.Errorf("reading helm secret for paths: %w", err)
	}
	// Rancher Fleet fails on a Secret without the key too (its file is
	// missing); accepting it would silently drop every path's credentials,
	// helmSecretName's too. An empty value is, as there, an empty YAML
	// document: no per-path entries.
	data, ok := s.Data[helmKeyPathsSecret]
	if !ok {
		return auth, nil, &inputError{fmt.Errorf("helm secret for paths %q has no key %s", name, helmKeyPathsSecret)}
	}
	var entries map[string]helmPathAuth
	if err := yaml.Unmarshal(data, &entries); err != nil {
		return auth, nil, &inputError{fmt.Errorf("helm secret for paths %q: key %s: %v", name, helmKeyPathsSecret, err)}
	}
	byPath := map[string]bundlereader.HelmAuth{}
	for p, e := range entries {
		byPath[p] = bundlereader.HelmAuth{
			Username: e.Username, Password: e.Password, CABundle: e.CABundle, SSHPrivateKey: e.SSHPrivateKey,
			InsecureSkipTLS: e.InsecureSkipVerify, BasicHTTP: e.BasicHTTP,
		}
	}
	return auth, byPath, configMapKnownHosts(ctx, r, &auth, byPath, systemNamespace)
}

// configMapKnownHosts sets auth's known hosts, when it has none, from the
// known-hosts ConfigMap of ns, provided auth or an entry of byPath holds an
// SSH key (entries inherit auth's known hosts).
func configMapKnownHosts(ctx context.Context, r client.Reader, auth *bundlereader.HelmAuth, byPath map[string]bundlereader.HelmAuth, ns string) error {
	if len(auth.SSHKnownHosts) > 0 {
		return nil
	}
	needed := len(auth.SSHPrivateKey) > 0
	for _, a := range byPath {
		needed = needed || len(a.SSHPrivateKey) > 0
	}
	if !needed {
		return nil
	}
	kh, err := git.ReadKnownHostsConfigMap(ctx, r, ns)
	auth.SSHKnownHosts = kh
	return err
}

// targetsFor turns GitRepo targets into bundle targets and restrictions:
// each entry is both, and no entry means the ClusterGroup "default"
// (Fleet's targets.yaml).
func targetsFor(repo *fleet.GitRepo) ([]fleet.BundleTarget, []fleet.BundleTargetRestriction) {
	gts := repo.Spec.Targets
	if len(gts) == 0 {
		gts = []fleet.GitTarget{{Name: "default", ClusterGroup: fleet.DefaultClusterGroup}}
	}
	targets := make([]fleet.BundleTarget, 0, len(gts))
	restrictions := make([]fleet.BundleTargetRestriction, 0, len(gts))
	for _, t := range gts {
		targets = append(targets, fleet.BundleTarget{
			Name: t.Name, ClusterName: t.ClusterName, ClusterSelector: t.ClusterSelector.DeepCopy(),
			ClusterGroup: t.ClusterGroup, ClusterGroupSelector: t.ClusterGroupSelector.DeepCopy(),
		})
		restrictions = append(restrictions, fleet.BundleTargetRestriction{
			Name: t.Name, ClusterName: t.ClusterName, ClusterSelector: t.ClusterSelector.DeepCopy(),
			ClusterGroup: t.ClusterGroup, ClusterGroupSelector: t.ClusterGroupSelector.DeepCopy(),
		})
	}
	return targets, restrictions
}

// bundleLabels are the GitRepo's own labels plus repo-name and commit.
func bundleLabels(repo *fleet.GitRepo, commit string) map[string]string {
	l := maps.Clone(repo.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[fleet.RepoLabel] = repo.Name
	l[fleet.CommitLabel] = commit
	return l
}

// readerOptions assembles the bundle reader options of a GitRepo.
func readerOptions(repo *fleet.GitRepo, commit string, auth bundlereader.HelmAuth, byPath map[string]bundlereader.HelmAuth, limits bundlereader.Limits) bundlereader.Options {
	targets, restrictions := targetsFor(repo)
	return bundlereader.Options{
		Namespace:          repo.Namespace,
		Labels:             bundleLabels(repo, commit),
		Targets:            targets,
		TargetRestrictions: restrictions,
		ServiceAccount:     repo.Spec.ServiceAccount,
		TargetNamespace:    repo.Spec.TargetNamespace,
		Paused:             repo.Spec.Paused,
		KeepResources:      repo.Spec.KeepResources,
		DeleteNamespace:    repo.Spec.DeleteNamespace,
		CorrectDrift:       repo.Spec.CorrectDrift.DeepCopy(),
		SyncGeneration:     repo.Spec.ForceSyncGeneration,
		Auth:               auth,
		AuthByPath:         byPath,
		HelmRepoURLRegex:   helmRepoURLRegex(repo),
		Limits:             limits,
	}
}

// helmRepoURLRegex is the helmRepoURLRegex the reader applies: none with
// helmSecretNameForPaths. Rancher Fleet's gitjob passes the regex to fleet
// apply only with helmSecretName, so the credentials of a path's entry go
// to its charts whatever their URL (still only to the host a chart is
// fetched from, and not to its dependencies' repositories); applying the
// regex would refuse them for charts that work in Rancher. helmSecretName
// is then ignored (helmAuth), so the regex has nothing else to restrict.
func helmRepoURLRegex(repo *fleet.GitRepo) string {
	if repo.Spec.HelmSecretNameForPaths != "" {
		return ""
	}
	return repo.Spec.HelmRepoURLRegex
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
