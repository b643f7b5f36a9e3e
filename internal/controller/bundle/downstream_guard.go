package bundle

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/policy"
)

// defaultGitCredential is the client Secret a GitRepo that names none uses
// when it exists (internal/gitops/controller.DefaultClientSecretName, which
// this package cannot import: that package imports this one).
const defaultGitCredential = "gitcredential"

// downstreamRefusal says why Secret s, named in a Bundle's
// downstreamResources, must not be copied into cluster namespaces ("" when
// it may). The copy is readable by the agent, which writes it to the
// downstream cluster, and whoever can push a fleet.yaml to a watched repo
// chooses the names: without this check they could ship Fleet's own
// credentials (registration tokens, agent credentials, other bundles'
// values) or any service-account token of the namespace to a cluster they
// target. Only metadata and the type are looked at; the payload never
// appears in the answer.
func downstreamRefusal(s *corev1.Secret) string {
	if s.Type == corev1.SecretTypeServiceAccountToken {
		return "it is a service-account token"
	}
	if strings.HasPrefix(string(s.Type), fleet.LabelPrefix) {
		return fmt.Sprintf("its type %s is internal to Fleet", s.Type)
	}
	for k := range s.Labels {
		if strings.HasPrefix(k, fleet.LabelPrefix) {
			return fmt.Sprintf("it carries Fleet's label %s", k)
		}
	}
	for _, ref := range s.OwnerReferences {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err == nil && (gv.Group == fleet.GroupVersion.Group || strings.HasSuffix(gv.Group, "."+fleet.GroupVersion.Group)) {
			return fmt.Sprintf("it is owned by Fleet's %s %s", ref.Kind, ref.Name)
		}
	}
	return ""
}

// credentialSecrets maps the names of the Secrets of namespace ns that
// Fleet uses as credentials to what uses them: the client and Helm Secrets
// of its GitRepos (gitcredential for those naming none), the Helm Secrets
// of its HelmOps, the default and allowed credential names of its
// GitRepoRestrictions and Policies, and the kubeconfig Secrets of the
// Clusters (of any namespace) imported with a Secret from ns.
//
// GitRepos and HelmOps are listed from the API server: the manager caches
// only its own shard's, and a credential of another shard's GitRepo in the
// same namespace must be refused too. A kind the API server does not serve
// (HelmOps on old CRDs) uses no Secret. Clusters, GitRepoRestrictions and
// Policies are watched by this reconciler, so read from the cache.
func (r *Reconciler) credentialSecrets(ctx context.Context, ns string) (map[string]string, error) {
	out := map[string]string{}
	add := func(name, why string) {
		if name != "" && out[name] == "" {
			out[name] = why
		}
	}
	var repos fleet.GitRepoList
	if err := r.APIReader.List(ctx, &repos, client.InNamespace(ns)); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing GitRepos of %s: %w", ns, err)
	}
	for i := range repos.Items {
		g := &repos.Items[i]
		if g.Spec.ClientSecretName == "" {
			add(defaultGitCredential, "GitRepo "+g.Name+" uses it as its default client Secret")
		}
		add(g.Spec.ClientSecretName, "GitRepo "+g.Name+" names it as clientSecretName")
		add(g.Spec.HelmSecretName, "GitRepo "+g.Name+" names it as helmSecretName")
		add(g.Spec.HelmSecretNameForPaths, "GitRepo "+g.Name+" names it as helmSecretNameForPaths")
		add(g.Spec.WebhookSecret, "GitRepo "+g.Name+" names it as webhookSecret")
		// Ignored by this manager, but a credential all the same.
		add(g.Spec.OCIRegistrySecret, "GitRepo "+g.Name+" names it as ociRegistrySecret")
	}
	var ops fleet.HelmOpList
	if err := r.APIReader.List(ctx, &ops, client.InNamespace(ns)); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing HelmOps of %s: %w", ns, err)
	}
	for i := range ops.Items {
		add(ops.Items[i].Spec.HelmSecretName, "HelmOp "+ops.Items[i].Name+" names it as helmSecretName")
	}
	var restrictions fleet.GitRepoRestrictionList
	if err := r.List(ctx, &restrictions, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing GitRepoRestrictions of %s: %w", ns, err)
	}
	for i := range restrictions.Items {
		rs := &restrictions.Items[i]
		why := "GitRepoRestriction " + rs.Name + " names it as a client Secret"
		add(rs.DefaultClientSecretName, why)
		for _, n := range rs.AllowedClientSecretNames {
			add(n, why)
		}
	}
	if err := r.addPolicyCredentials(ctx, ns, add); err != nil {
		return nil, err
	}
	// A Cluster may name a kubeconfig Secret of another namespace
	// (kubeConfigSecretNamespace): every Cluster is looked at, read-only.
	var clusters fleet.ClusterList
	if err := r.List(ctx, &clusters, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Clusters: %w", err)
	}
	for i := range clusters.Items {
		c := &clusters.Items[i]
		secretNS := c.Spec.KubeConfigSecretNamespace
		if secretNS == "" {
			secretNS = c.Namespace
		}
		if secretNS == ns {
			add(c.Spec.KubeConfigSecret, "Cluster "+c.Namespace+"/"+c.Name+" names it as kubeConfigSecret")
		}
	}
	return out, nil
}

// addPolicyCredentials adds the credential names of the Policies of ns
// (none while the API server does not serve Policies).
func (r *Reconciler) addPolicyCredentials(ctx context.Context, ns string, add func(name, why string)) error {
	policies, err := policy.List(ctx, r.policyReader(), ns)
	if err != nil {
		return fmt.Errorf("listing Policies of %s: %w", ns, err)
	}
	for i := range policies {
		p := &policies[i]
		if g := p.GitRepo; g != nil {
			why := "Policy " + p.Name + " names it as a GitRepo client Secret"
			add(g.DefaultClientSecretName, why)
			for _, n := range g.AllowedClientSecretNames {
				add(n, why)
			}
		}
		if h := p.HelmOp; h != nil {
			why := "Policy " + p.Name + " names it as a HelmOp Helm Secret"
			add(h.DefaultHelmSecretName, why)
			for _, n := range h.AllowedHelmSecretNames {
				add(n, why)
			}
		}
	}
	return nil
}

// passCredentials holds credentialSecrets for one reconcile pass of a
// Bundle, which writes its deployments in parallel: read once, not once per
// cluster (two API-server lists and a walk over every Cluster each time).
type passCredentials struct {
	once  sync.Once
	names map[string]string
	err   error
}

type passCredentialsKey struct{}

// withPassCredentials marks ctx as one pass over a Bundle's deployments.
func withPassCredentials(ctx context.Context) context.Context {
	return context.WithValue(ctx, passCredentialsKey{}, &passCredentials{})
}

// passCredentialSecrets is credentialSecrets, computed once per pass when
// ctx carries one (withPassCredentials).
func (r *Reconciler) passCredentialSecrets(ctx context.Context, ns string) (map[string]string, error) {
	p, _ := ctx.Value(passCredentialsKey{}).(*passCredentials)
	if p == nil {
		return r.credentialSecrets(ctx, ns)
	}
	p.once.Do(func() { p.names, p.err = r.credentialSecrets(ctx, ns) })
	return p.names, p.err
}
