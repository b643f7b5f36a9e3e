package target

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestAuthorizeGitRepo: the checks made on a GitRepo before anything is
// fetched for it, with the defaults applied, over several restrictions of
// a namespace combined.
func TestAuthorizeGitRepo(t *testing.T) {
	restriction := func(name string, r fleet.GitRepoRestriction) *fleet.GitRepoRestriction {
		r.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: "ws"}
		return &r
	}
	const repo = "https://github.com/ok/app"
	for _, tc := range []struct {
		name         string
		restrictions []*fleet.GitRepoRestriction
		spec         fleet.GitRepoSpec
		wantErr      string
		wantSecret   string
	}{
		{name: "no restriction: anything goes", spec: fleet.GitRepoSpec{Repo: "https://evil.example/x", ClientSecretName: "any"}, wantSecret: "any"},
		{name: "repo matching no pattern",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{AllowedRepoPatterns: []string{`^https://github\.com/ok/`}})},
			spec:         fleet.GitRepoSpec{Repo: "https://evil.example/x"}, wantErr: "repo https://evil.example/x is not allowed"},
		{name: "patterns of all restrictions are united",
			restrictions: []*fleet.GitRepoRestriction{
				restriction("a", fleet.GitRepoRestriction{AllowedRepoPatterns: []string{`^https://gitlab\.com/`}}),
				restriction("b", fleet.GitRepoRestriction{AllowedRepoPatterns: []string{`^https://github\.com/ok/`}})},
			spec: fleet.GitRepoSpec{Repo: repo}},
		{name: "invalid pattern", restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{AllowedRepoPatterns: []string{`(`}})},
			spec: fleet.GitRepoSpec{Repo: repo}, wantErr: "invalid allowedRepoPatterns"},
		{name: "default client secret applied",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{DefaultClientSecretName: "team", AllowedClientSecretNames: []string{"team"}})},
			spec:         fleet.GitRepoSpec{Repo: repo}, wantSecret: "team"},
		{name: "the first default by restriction name wins",
			restrictions: []*fleet.GitRepoRestriction{
				restriction("z", fleet.GitRepoRestriction{DefaultClientSecretName: "late"}),
				restriction("a", fleet.GitRepoRestriction{DefaultClientSecretName: "early"})},
			spec: fleet.GitRepoSpec{Repo: repo}, wantSecret: "early"},
		{name: "own client secret kept when allowed",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{DefaultClientSecretName: "team", AllowedClientSecretNames: []string{"team", "mine"}})},
			spec:         fleet.GitRepoSpec{Repo: repo, ClientSecretName: "mine"}, wantSecret: "mine"},
		{name: "client secret not allowed",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{AllowedClientSecretNames: []string{"team"}})},
			spec:         fleet.GitRepoSpec{Repo: repo, ClientSecretName: "admin-creds"}, wantErr: `clientSecretName "admin-creds" is not allowed`},
		{name: "service account not allowed",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{AllowedServiceAccounts: []string{"deployer"}})},
			spec:         fleet.GitRepoSpec{Repo: repo, ServiceAccount: "cluster-admin"}, wantErr: `serviceAccount "cluster-admin" is not allowed`},
		{name: "a default service account that is not allowed",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{DefaultServiceAccount: "root", AllowedServiceAccounts: []string{"deployer"}})},
			spec:         fleet.GitRepoSpec{Repo: repo}, wantErr: `serviceAccount "root" is not allowed`},
		{name: "no service account is left to the bundles",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{AllowedServiceAccounts: []string{"deployer"}})},
			spec:         fleet.GitRepoSpec{Repo: repo}},
		{name: "target namespace not allowed",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{AllowedTargetNamespaces: []string{"apps"}})},
			spec:         fleet.GitRepoSpec{Repo: repo, TargetNamespace: "kube-system"}, wantErr: `target namespace "kube-system" is not allowed`},
		{name: "target namespace required",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{AllowedTargetNamespaces: []string{"apps"}})},
			spec:         fleet.GitRepoSpec{Repo: repo}, wantErr: "targetNamespace must be set"},
		{name: "all allowed",
			restrictions: []*fleet.GitRepoRestriction{restriction("a", fleet.GitRepoRestriction{
				AllowedRepoPatterns: []string{`^https://github\.com/ok/`}, AllowedClientSecretNames: []string{"team"},
				AllowedServiceAccounts: []string{"deployer"}, AllowedTargetNamespaces: []string{"apps"}})},
			spec: fleet.GitRepoSpec{Repo: repo, ClientSecretName: "team", ServiceAccount: "deployer", TargetNamespace: "apps"}, wantSecret: "team"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			got, err := AuthorizeGitRepo(tc.restrictions, &spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ClientSecretName != tc.wantSecret {
				t.Fatalf("client secret %q, want %q", got.ClientSecretName, tc.wantSecret)
			}
			if spec.ClientSecretName != tc.spec.ClientSecretName {
				t.Fatalf("the default was written into the spec: %q", spec.ClientSecretName)
			}
		})
	}
}

// TestSecretAllowed: the implicit Secret gitcredential, used when no
// clientSecretName applies, must be listed like any other name.
func TestSecretAllowed(t *testing.T) {
	open, err := AuthorizeGitRepo(nil, &fleet.GitRepoSpec{Repo: "r"})
	if err != nil || !open.SecretAllowed("gitcredential") {
		t.Fatalf("without restrictions: %v %v", open.SecretAllowed("gitcredential"), err)
	}
	limited, err := AuthorizeGitRepo([]*fleet.GitRepoRestriction{{AllowedClientSecretNames: []string{"team"}}}, &fleet.GitRepoSpec{Repo: "r"})
	if err != nil || limited.SecretAllowed("gitcredential") || !limited.SecretAllowed("team") {
		t.Fatalf("limited: gitcredential %v team %v err %v", limited.SecretAllowed("gitcredential"), limited.SecretAllowed("team"), err)
	}
}
