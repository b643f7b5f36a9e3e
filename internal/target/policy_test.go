package target

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func policy(name string, mod func(p *fleet.Policy)) fleet.Policy {
	p := fleet.Policy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws"}}
	if mod != nil {
		mod(&p)
	}
	return p
}

// TestCombinePolicies: Policies are taken by name whatever the list order;
// booleans are ORed, lists united, the first default set wins.
func TestCombinePolicies(t *testing.T) {
	b := policy("b", func(p *fleet.Policy) {
		p.AllowedServiceAccounts = []string{"sa-b"}
		p.GitRepo = &fleet.GitRepoPolicy{DefaultServiceAccount: "git-b", DefaultClientSecretName: "sec-b", AllowedClientSecretNames: []string{"sec-b"}}
		p.HelmOp = &fleet.HelmOpPolicy{DefaultServiceAccount: "helm-b", AllowedHelmSecretNames: []string{"h-b"}}
	})
	a := policy("a", func(p *fleet.Policy) {
		p.RequireServiceAccount = true
		p.AllowedServiceAccounts = []string{"sa-a"}
		p.GitRepo = &fleet.GitRepoPolicy{AllowedClientSecretNames: []string{"sec-a"}}
		p.HelmOp = &fleet.HelmOpPolicy{DefaultServiceAccount: "helm-a", DefaultHelmSecretName: "h-a"}
	})
	c := policy("c", func(p *fleet.Policy) {
		p.AllowNamespaceCreation = true
		p.GitRepo = &fleet.GitRepoPolicy{DefaultServiceAccount: "git-c"}
	})
	s := CombinePolicies([]fleet.Policy{c, b, a})
	checks := []struct {
		name      string
		got, want any
	}{
		{"names", strings.Join(s.names, ","), "a,b,c"},
		{"requireSA", s.requireSA, true},
		{"allowNamespace", s.allowNamespace, true},
		{"allowedSAs", strings.Join(s.allowedSAs, ","), "sa-a,sa-b"},
		{"git default SA (b before c)", s.gitDefaultSA, "git-b"},
		{"git default secret", s.gitDefaultSecret, "sec-b"},
		{"git secrets", strings.Join(s.gitSecrets, ","), "sec-a,sec-b"},
		{"helm default SA (a before b)", s.helmDefaultSA, "helm-a"},
		{"helm default secret", s.helmDefaultSecret, "h-a"},
		{"helm secrets", strings.Join(s.helmSecrets, ","), "h-b"},
		{"namespace creation stays on (one Policy allows it)", s.DisablesNamespaceCreation(), false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestPolicyNamespaceCreation: requireServiceAccount without
// allowNamespaceCreation (false or unset, the same for a bool) turns
// namespace creation off; no Policy, or allowNamespaceCreation, leaves it on.
func TestPolicyNamespaceCreation(t *testing.T) {
	require := func(p *fleet.Policy) { p.RequireServiceAccount = true }
	cases := []struct {
		name     string
		policies []fleet.Policy
		want     bool
	}{
		{"no Policy", nil, false},
		{"Policy without requireServiceAccount", []fleet.Policy{policy("a", nil)}, false},
		{"requireServiceAccount, allowNamespaceCreation unset", []fleet.Policy{policy("a", require)}, true},
		{"requireServiceAccount and allowNamespaceCreation", []fleet.Policy{policy("a", func(p *fleet.Policy) {
			p.RequireServiceAccount, p.AllowNamespaceCreation = true, true
		})}, false},
		{"require in one, allow in another", []fleet.Policy{policy("a", require), policy("b", func(p *fleet.Policy) { p.AllowNamespaceCreation = true })}, false},
	}
	for _, c := range cases {
		if got := CombinePolicies(c.policies).DisablesNamespaceCreation(); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAuthorizeGitRepoByPolicy covers defaults, allowed lists and the
// pattern rules (anchored, verbatim, invalid) for GitRepos.
func TestAuthorizeGitRepoByPolicy(t *testing.T) {
	repos := func(patterns ...string) fleet.Policy {
		return policy("repos", func(p *fleet.Policy) { p.GitRepo = &fleet.GitRepoPolicy{AllowedRepoPatterns: patterns} })
	}
	cases := []struct {
		name     string
		policies []fleet.Policy
		spec     fleet.GitRepoSpec
		want     Granted
		// refused: substrings of the refusal; none: allowed.
		refused []string
		// hidden: never in the message.
		hidden string
	}{
		{name: "no Policy", spec: fleet.GitRepoSpec{Repo: "https://x/r", ServiceAccount: "sa"}, want: Granted{ServiceAccount: "sa"}},
		{name: "defaults filled in", policies: []fleet.Policy{policy("p", func(p *fleet.Policy) {
			p.GitRepo = &fleet.GitRepoPolicy{DefaultServiceAccount: "tenant", DefaultClientSecretName: "creds"}
		})}, spec: fleet.GitRepoSpec{Repo: "https://x/r"}, want: Granted{ServiceAccount: "tenant", SecretName: "creds"}},
		{name: "own values win over defaults", policies: []fleet.Policy{policy("p", func(p *fleet.Policy) {
			p.GitRepo = &fleet.GitRepoPolicy{DefaultServiceAccount: "tenant", DefaultClientSecretName: "creds"}
		})}, spec: fleet.GitRepoSpec{Repo: "https://x/r", ServiceAccount: "mine", ClientSecretName: "own"}, want: Granted{ServiceAccount: "mine", SecretName: "own"}},
		{name: "pattern matches whole URL", policies: []fleet.Policy{repos(`https://github\.com/acme/.*`)},
			spec: fleet.GitRepoSpec{Repo: "https://github.com/acme/app"}},
		{name: "pattern is anchored at the start", policies: []fleet.Policy{repos(`github\.com/acme/.*`)},
			spec:    fleet.GitRepoSpec{Repo: "https://github.com/acme/app"},
			refused: []string{"spec.repo", "gitRepo.allowedRepoPatterns", `github\\.com/acme/.*`, "Policy repos"}},
		{name: "pattern is anchored at the end", policies: []fleet.Policy{repos(`https://github\.com/acme`)},
			spec: fleet.GitRepoSpec{Repo: "https://github.com/acme-evil/x"}, refused: []string{"matches none"}},
		{name: "alternation stays anchored", policies: []fleet.Policy{repos(`https://a/x|https://b/y`)},
			spec: fleet.GitRepoSpec{Repo: "https://b/y/extra"}, refused: []string{"matches none"}},
		{name: "verbatim match, even if not a valid regex", policies: []fleet.Policy{repos(`https://x/(repo`)},
			spec: fleet.GitRepoSpec{Repo: "https://x/(repo"}},
		{name: "invalid pattern refuses naming Policy and pattern", policies: []fleet.Policy{repos(`https://x/(repo`)},
			spec: fleet.GitRepoSpec{Repo: "https://x/other"}, refused: []string{"Policy repos", "invalid gitRepo.allowedRepoPatterns entry", `"https://x/(repo"`}},
		{name: "refusal redacts user-info", policies: []fleet.Policy{repos(`https://github\.com/.*`)},
			spec:    fleet.GitRepoSpec{Repo: "https://user:s3cret@git.example.com/r.git"},
			refused: []string{`"https://***@git.example.com/r.git"`}, hidden: "s3cret"},
		{name: "token as user name redacted", policies: []fleet.Policy{repos(`https://github\.com/.*`)},
			spec:    fleet.GitRepoSpec{Repo: "https://ghp_token@git.example.com/r.git"},
			refused: []string{"***@git.example.com"}, hidden: "ghp_token"},
		{name: "client secret not allowed", policies: []fleet.Policy{policy("p", func(p *fleet.Policy) {
			p.GitRepo = &fleet.GitRepoPolicy{AllowedClientSecretNames: []string{"ok"}}
		})}, spec: fleet.GitRepoSpec{Repo: "https://x/r", ClientSecretName: "other"}, refused: []string{`clientSecretName "other"`, "gitRepo.allowedClientSecretNames"}},
		{name: "default client secret allowed though not listed", policies: []fleet.Policy{policy("p", func(p *fleet.Policy) {
			p.GitRepo = &fleet.GitRepoPolicy{DefaultClientSecretName: "def", AllowedClientSecretNames: []string{"ok"}}
		})}, spec: fleet.GitRepoSpec{Repo: "https://x/r"}, want: Granted{SecretName: "def"}},
		{name: "require SA refuses empty", policies: []fleet.Policy{policy("p", func(p *fleet.Policy) { p.RequireServiceAccount = true })},
			spec: fleet.GitRepoSpec{Repo: "https://x/r"}, refused: []string{"serviceAccount is empty", "requireServiceAccount"}},
		{name: "require SA met by gitRepo default", policies: []fleet.Policy{policy("p", func(p *fleet.Policy) {
			p.RequireServiceAccount = true
			p.GitRepo = &fleet.GitRepoPolicy{DefaultServiceAccount: "tenant"}
		})}, spec: fleet.GitRepoSpec{Repo: "https://x/r"}, want: Granted{ServiceAccount: "tenant"}},
		{name: "helmOp default does not serve GitRepos", policies: []fleet.Policy{policy("p", func(p *fleet.Policy) {
			p.RequireServiceAccount = true
			p.HelmOp = &fleet.HelmOpPolicy{DefaultServiceAccount: "tenant"}
		})}, spec: fleet.GitRepoSpec{Repo: "https://x/r"}, refused: []string{"serviceAccount is empty"}},
		{name: "SA not allowed", policies: []fleet.Policy{policy("p", func(p *fleet.Policy) { p.AllowedServiceAccounts = []string{"a"} })},
			spec: fleet.GitRepoSpec{Repo: "https://x/r", ServiceAccount: "b"}, refused: []string{`serviceAccount "b"`, "allowedServiceAccounts"}},
		{name: "empty SA not checked against the list without requireServiceAccount", policies: []fleet.Policy{policy("p", func(p *fleet.Policy) { p.AllowedServiceAccounts = []string{"a"} })},
			spec: fleet.GitRepoSpec{Repo: "https://x/r"}},
		{name: "bad helmOp pattern does not stop GitRepos", policies: []fleet.Policy{policy("p", func(p *fleet.Policy) {
			p.HelmOp = &fleet.HelmOpPolicy{AllowedChartPatterns: []string{"("}}
		})}, spec: fleet.GitRepoSpec{Repo: "https://x/r"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CombinePolicies(c.policies).AuthorizeGitRepo(&c.spec)
			checkRefusal(t, err, c.refused, c.hidden)
			if len(c.refused) == 0 && got != c.want {
				t.Errorf("granted %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestAuthorizeHelmOpByPolicy covers the helmOp section.
func TestAuthorizeHelmOpByPolicy(t *testing.T) {
	helm := func(h fleet.HelmOpPolicy) []fleet.Policy {
		return []fleet.Policy{policy("helm", func(p *fleet.Policy) { p.HelmOp = &h })}
	}
	spec := func(repo, chart, secret, sa string) fleet.HelmOpSpec {
		s := fleet.HelmOpSpec{HelmSecretName: secret}
		s.ServiceAccount = sa
		s.Helm = &fleet.HelmOptions{Repo: repo, Chart: chart}
		return s
	}
	cases := []struct {
		name     string
		policies []fleet.Policy
		spec     fleet.HelmOpSpec
		want     Granted
		refused  []string
		hidden   string
	}{
		{name: "chart allowed", policies: helm(fleet.HelmOpPolicy{AllowedChartPatterns: []string{"app-.*"}}),
			spec: spec("https://charts.example.com", "app-web", "", "")},
		{name: "chart refused", policies: helm(fleet.HelmOpPolicy{AllowedChartPatterns: []string{"app-.*"}}),
			spec: spec("https://charts.example.com", "db", "", ""), refused: []string{`spec.helm.chart "db"`, "helmOp.allowedChartPatterns", `"app-.*"`}},
		{name: "oci chart URL redacted", policies: helm(fleet.HelmOpPolicy{AllowedChartPatterns: []string{"oci://ok/.*"}}),
			spec: spec("", "oci://u:pw-123@reg.example.com/c", "", ""), refused: []string{"oci://***@reg.example.com/c"}, hidden: "pw-123"},
		{name: "repo refused, redacted", policies: helm(fleet.HelmOpPolicy{AllowedHelmRepoPatterns: []string{`https://charts\.example\.com`}}),
			spec: spec("https://u:pw-123@evil.example.com", "app", "", ""), refused: []string{"spec.helm.repo", "helmOp.allowedHelmRepoPatterns"}, hidden: "pw-123"},
		{name: "repo verbatim", policies: helm(fleet.HelmOpPolicy{AllowedHelmRepoPatterns: []string{"https://charts.example.com/a+b"}}),
			spec: spec("https://charts.example.com/a+b", "app", "", "")},
		{name: "invalid chart pattern", policies: helm(fleet.HelmOpPolicy{AllowedChartPatterns: []string{"[app"}}),
			spec: spec("", "app", "", ""), refused: []string{"Policy helm", "invalid helmOp.allowedChartPatterns entry", `"[app"`}},
		{name: "helm secret refused", policies: helm(fleet.HelmOpPolicy{AllowedHelmSecretNames: []string{"ok"}}),
			spec: spec("https://r", "app", "other", ""), refused: []string{`helmSecretName "other"`, "helmOp.allowedHelmSecretNames"}},
		{name: "defaults", policies: helm(fleet.HelmOpPolicy{DefaultServiceAccount: "tenant", DefaultHelmSecretName: "creds", AllowedHelmSecretNames: []string{"x"}}),
			spec: spec("https://r", "app", "", ""), want: Granted{ServiceAccount: "tenant", SecretName: "creds"}},
		{name: "no helm section: empty values allowed", policies: []fleet.Policy{policy("p", nil)}, spec: fleet.HelmOpSpec{}},
		// Without a repo the chart is the source: it must match the repo
		// patterns, or the default Secret would reach any host.
		{name: "chart URL without repo must match the repo patterns", policies: helm(fleet.HelmOpPolicy{
			AllowedHelmRepoPatterns: []string{`https://charts\.corp\.com/.*`}, DefaultHelmSecretName: "corp"}),
			spec: spec("", "oci://attacker.example/x", "", ""), refused: []string{"spec.helm.chart (its source, without a repo)", "helmOp.allowedHelmRepoPatterns"}},
		{name: "git chart without repo, redacted", policies: helm(fleet.HelmOpPolicy{AllowedHelmRepoPatterns: []string{`https://charts\.corp\.com/.*`}}),
			spec: spec("", "git::https://user:tok-999@github.com/o/r", "", ""), refused: []string{"git::https://***@github.com/o/r"}, hidden: "tok-999"},
		{name: "chart URL without repo allowed by the repo patterns", policies: helm(fleet.HelmOpPolicy{AllowedHelmRepoPatterns: []string{`oci://reg\.corp\.com/.*`}}),
			spec: spec("", "oci://reg.corp.com/charts/web", "", "")},
		// A target's own chart is downloaded too.
		{name: "target chart refused", policies: helm(fleet.HelmOpPolicy{AllowedChartPatterns: []string{"web-.*"},
			AllowedHelmRepoPatterns: []string{`https://charts\.corp\.com/.*`}}),
			spec: func() fleet.HelmOpSpec {
				s := spec("https://charts.corp.com/stable", "web-app", "", "")
				s.Targets = []fleet.BundleTarget{{Name: "all", BundleDeploymentOptions: fleet.BundleDeploymentOptions{
					Helm: &fleet.HelmOptions{Repo: "https://other.example/charts", Chart: "evil"}}}}
				return s
			}(), refused: []string{"spec.targets[0].helm.repo", "helmOp.allowedHelmRepoPatterns"}},
		{name: "target chart name refused", policies: helm(fleet.HelmOpPolicy{AllowedChartPatterns: []string{"web-.*"}}),
			spec: func() fleet.HelmOpSpec {
				s := spec("https://charts.corp.com/stable", "web-app", "", "")
				s.Targets = []fleet.BundleTarget{{Name: "all", BundleDeploymentOptions: fleet.BundleDeploymentOptions{
					Helm: &fleet.HelmOptions{Chart: "evil"}}}}
				return s
			}(), refused: []string{`spec.targets[0].helm.chart "evil"`, "helmOp.allowedChartPatterns"}},
		{name: "target chart name from the HelmOp's repo", policies: helm(fleet.HelmOpPolicy{AllowedChartPatterns: []string{"web-.*"},
			AllowedHelmRepoPatterns: []string{`https://charts\.corp\.com/.*`}}),
			spec: func() fleet.HelmOpSpec {
				s := spec("https://charts.corp.com/stable", "web-app", "", "")
				s.Targets = []fleet.BundleTarget{{Name: "all", BundleDeploymentOptions: fleet.BundleDeploymentOptions{
					Helm: &fleet.HelmOptions{Chart: "web-db"}}}}
				return s
			}()},
		{name: "target chart URL without any repo", policies: helm(fleet.HelmOpPolicy{AllowedHelmRepoPatterns: []string{`oci://reg\.corp\.com/.*`}}),
			spec: func() fleet.HelmOpSpec {
				s := spec("", "oci://reg.corp.com/web", "", "")
				s.Targets = []fleet.BundleTarget{{Name: "all", BundleDeploymentOptions: fleet.BundleDeploymentOptions{
					Helm: &fleet.HelmOptions{Chart: "oci://evil.example/web"}}}}
				return s
			}(), refused: []string{"spec.targets[0].helm.chart (its source, without a repo)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CombinePolicies(c.policies).AuthorizeHelmOp(&c.spec)
			checkRefusal(t, err, c.refused, c.hidden)
			if len(c.refused) == 0 && got != c.want {
				t.Errorf("granted %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestPolicyCheckServiceAccount is the Bundle controller's check.
func TestPolicyCheckServiceAccount(t *testing.T) {
	s := CombinePolicies([]fleet.Policy{policy("p", func(p *fleet.Policy) {
		p.RequireServiceAccount = true
		p.AllowedServiceAccounts = []string{"a"}
	})})
	checkRefusal(t, s.CheckServiceAccount(""), []string{"serviceAccount is empty"}, "")
	checkRefusal(t, s.CheckServiceAccount("b"), []string{`serviceAccount "b"`}, "")
	checkRefusal(t, s.CheckServiceAccount("a"), nil, "")
	checkRefusal(t, CombinePolicies(nil).CheckServiceAccount(""), nil, "")
}

func TestRedactURL(t *testing.T) {
	cases := map[string]string{
		"https://github.com/a/b":            "https://github.com/a/b",
		"https://u:p@h/x":                   "https://***@h/x",
		"https://u:p@ss@h/x@y":              "https://***@h/x@y",
		"git@github.com:a/b.git":            "git@github.com:a/b.git",
		"ssh://git@github.com/a/b":          "ssh://***@github.com/a/b",
		"oci://tok@reg.example.com/c?x=y@z": "oci://***@reg.example.com/c?x=y@z",
		"git::https://u:tok@github.com/o/r": "git::https://***@github.com/o/r",
	}
	for in, want := range cases {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func checkRefusal(t *testing.T, err error, refused []string, hidden string) {
	t.Helper()
	if len(refused) == 0 {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	var pe *PolicyError
	if !errors.As(err, &pe) {
		t.Fatalf("want a *PolicyError, got %v", err)
	}
	for _, s := range refused {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message %q does not contain %q", err, s)
		}
	}
	if hidden != "" && strings.Contains(err.Error(), hidden) {
		t.Errorf("message %q quotes %q", err, hidden)
	}
}
