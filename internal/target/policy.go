package target

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/redact"
)

// PolicyError is an object its namespace's Policies refuse, or a Policy that
// cannot be applied (an invalid pattern): bad input that no retry mends,
// only a change of the object or of a Policy.
type PolicyError struct{ Err error }

func (e *PolicyError) Error() string { return e.Err.Error() }
func (e *PolicyError) Unwrap() error { return e.Err }

func refuse(format string, args ...any) error {
	return &PolicyError{Err: fmt.Errorf(format, args...)}
}

// pattern is one allowed*Patterns entry and the Policy it comes from, so
// that an invalid one can be named.
type pattern struct {
	policy string
	expr   string
}

// PolicySet is the combination of the Policies of one namespace, as Rancher
// Fleet combines them: taken in name order, booleans ORed, lists united and
// each default the first one set. The zero value (no Policy) allows
// everything and defaults nothing.
type PolicySet struct {
	names          []string
	requireSA      bool
	allowedSAs     []string
	allowNamespace bool

	gitDefaultSA     string
	gitDefaultSecret string
	gitSecrets       []string
	gitRepos         []pattern

	helmDefaultSA     string
	helmDefaultSecret string
	helmSecrets       []string
	helmRepos         []pattern
	helmCharts        []pattern
}

// CombinePolicies combines the Policies of a namespace. It does not compile
// the patterns: an invalid one refuses only the objects it is checked
// against (a bad helmOp pattern does not stop the GitRepos).
func CombinePolicies(list []fleet.Policy) *PolicySet {
	sorted := slices.Clone(list)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	s := &PolicySet{}
	for i := range sorted {
		p := &sorted[i]
		s.names = append(s.names, p.Name)
		s.requireSA = s.requireSA || p.RequireServiceAccount
		// One Policy allowing namespace creation allows it for the whole
		// namespace, as in Rancher Fleet (OR, the least restrictive).
		s.allowNamespace = s.allowNamespace || p.AllowNamespaceCreation
		s.allowedSAs = append(s.allowedSAs, p.AllowedServiceAccounts...)
		if g := p.GitRepo; g != nil {
			s.gitDefaultSA = firstSet(s.gitDefaultSA, g.DefaultServiceAccount)
			s.gitDefaultSecret = firstSet(s.gitDefaultSecret, g.DefaultClientSecretName)
			s.gitSecrets = append(s.gitSecrets, g.AllowedClientSecretNames...)
			s.gitRepos = appendPatterns(s.gitRepos, p.Name, g.AllowedRepoPatterns)
		}
		if h := p.HelmOp; h != nil {
			s.helmDefaultSA = firstSet(s.helmDefaultSA, h.DefaultServiceAccount)
			s.helmDefaultSecret = firstSet(s.helmDefaultSecret, h.DefaultHelmSecretName)
			s.helmSecrets = append(s.helmSecrets, h.AllowedHelmSecretNames...)
			s.helmRepos = appendPatterns(s.helmRepos, p.Name, h.AllowedHelmRepoPatterns)
			s.helmCharts = appendPatterns(s.helmCharts, p.Name, h.AllowedChartPatterns)
		}
	}
	return s
}

func firstSet(cur, next string) string {
	if cur != "" {
		return cur
	}
	return next
}

func appendPatterns(to []pattern, policy string, exprs []string) []pattern {
	for _, e := range exprs {
		to = append(to, pattern{policy: policy, expr: e})
	}
	return to
}

// Empty reports whether the namespace has no Policy.
func (s *PolicySet) Empty() bool { return s == nil || len(s.names) == 0 }

// DisablesNamespaceCreation reports whether BundleDeployments must get
// createNamespace=false: requireServiceAccount is set and no Policy sets
// allowNamespaceCreation, so that a tenant's service account is not made to
// need the cluster-wide right to create namespaces.
func (s *PolicySet) DisablesNamespaceCreation() bool {
	return s != nil && s.requireSA && !s.allowNamespace
}

// Granted is what the Policies let a GitRepo or HelmOp use once their
// defaults are applied: the controllers use these values on an in-memory
// copy of the object; its spec is never changed.
type Granted struct {
	ServiceAccount string
	SecretName     string
}

// AuthorizeGitRepo applies the gitRepo defaults to a GitRepo's
// serviceAccount and clientSecretName and checks them and its repo URL.
// Every refusal is a *PolicyError.
func (s *PolicySet) AuthorizeGitRepo(spec *fleet.GitRepoSpec) (Granted, error) {
	g := Granted{ServiceAccount: spec.ServiceAccount, SecretName: spec.ClientSecretName}
	if s.Empty() {
		return g, nil
	}
	g.ServiceAccount = firstSet(g.ServiceAccount, s.gitDefaultSA)
	g.SecretName = firstSet(g.SecretName, s.gitDefaultSecret)
	if err := matchAny("spec.repo", RedactURL(spec.Repo), spec.Repo, "gitRepo.allowedRepoPatterns", s.gitRepos); err != nil {
		return g, err
	}
	if err := checkSecret(s, "clientSecretName", g.SecretName, s.gitDefaultSecret, "gitRepo.allowedClientSecretNames", s.gitSecrets); err != nil {
		return g, err
	}
	return g, s.CheckServiceAccount(g.ServiceAccount)
}

// AuthorizeHelmOp applies the helmOp defaults to a HelmOp's serviceAccount
// and helmSecretName and checks them, its helm.repo and its helm.chart,
// and those of every target (the manager downloads a target's own chart
// too). Every refusal is a *PolicyError.
func (s *PolicySet) AuthorizeHelmOp(spec *fleet.HelmOpSpec) (Granted, error) {
	g := Granted{ServiceAccount: spec.ServiceAccount, SecretName: spec.HelmSecretName}
	if s.Empty() {
		return g, nil
	}
	g.ServiceAccount = firstSet(g.ServiceAccount, s.helmDefaultSA)
	g.SecretName = firstSet(g.SecretName, s.helmDefaultSecret)
	var baseRepo string
	if spec.Helm != nil {
		baseRepo = spec.Helm.Repo
	}
	if err := s.checkHelmSource("spec.helm", spec.Helm, ""); err != nil {
		return g, err
	}
	for i := range spec.Targets {
		if err := s.checkHelmSource(fmt.Sprintf("spec.targets[%d].helm", i), spec.Targets[i].Helm, baseRepo); err != nil {
			return g, err
		}
	}
	if err := checkSecret(s, "helmSecretName", g.SecretName, s.helmDefaultSecret, "helmOp.allowedHelmSecretNames", s.helmSecrets); err != nil {
		return g, err
	}
	return g, s.CheckServiceAccount(g.ServiceAccount)
}

// checkHelmSource checks the chart source h names (at field) against the
// helmOp patterns. Without a repo (its own, or for a target the HelmOp's,
// baseRepo) the chart itself is the source (an oci://, https:// or git::
// URL, or a shorthand: a HelmOp has no files of its own), so it must match
// allowedHelmRepoPatterns too; otherwise the namespace's helm Secret would
// reach any host a chart names, which Rancher Fleet does not prevent.
func (s *PolicySet) checkHelmSource(field string, h *fleet.HelmOptions, baseRepo string) error {
	if h == nil {
		return nil
	}
	if err := matchAny(field+".repo", RedactURL(h.Repo), h.Repo, "helmOp.allowedHelmRepoPatterns", s.helmRepos); err != nil {
		return err
	}
	if h.Repo == "" && baseRepo == "" {
		if err := matchAny(field+".chart (its source, without a repo)", RedactURL(h.Chart), h.Chart, "helmOp.allowedHelmRepoPatterns", s.helmRepos); err != nil {
			return err
		}
	}
	return matchAny(field+".chart", RedactURL(h.Chart), h.Chart, "helmOp.allowedChartPatterns", s.helmCharts)
}

// CheckServiceAccount checks the top-level rules every object follows
// (the Bundle controller checks each target's service account with it):
// requireServiceAccount refuses an empty one, allowedServiceAccounts one
// not listed. An empty one is not checked against the list unless
// requireServiceAccount is set, as in Rancher Fleet.
func (s *PolicySet) CheckServiceAccount(sa string) error {
	if s.Empty() {
		return nil
	}
	if sa == "" {
		if s.requireSA {
			return refuse("serviceAccount is empty, and Policy %s requires one (requireServiceAccount)", s.policiesText())
		}
		return nil
	}
	if len(s.allowedSAs) > 0 && !slices.Contains(s.allowedSAs, sa) {
		return refuse("serviceAccount %q is not allowed by Policy %s: allowedServiceAccounts are %q", sa, s.policiesText(), s.allowedSAs)
	}
	return nil
}

// CheckClientSecret checks a client Secret name a GitRepo would use without
// naming it (the gitcredential Secret) against gitRepo.allowedClientSecretNames.
func (s *PolicySet) CheckClientSecret(name string) error {
	if s.Empty() {
		return nil
	}
	return checkSecret(s, "clientSecretName", name, s.gitDefaultSecret, "gitRepo.allowedClientSecretNames", s.gitSecrets)
}

// checkSecret refuses a Secret name the allowed list does not hold. The
// Policies' own default (def) is allowed even if no list names it, so that a
// default cannot refuse the objects it is filled into (Rancher Fleet does
// not check a defaulted name at all).
func checkSecret(s *PolicySet, field, name, def, listField string, allowed []string) error {
	if name == "" || name == def || len(allowed) == 0 || slices.Contains(allowed, name) {
		return nil
	}
	return refuse("%s %q is not allowed by Policy %s: %s are %q", field, name, s.policiesText(), listField, allowed)
}

// policiesText names the Policies of the namespace for messages.
func (s *PolicySet) policiesText() string {
	return strings.Join(s.names, ", ")
}

// matchAny checks value against patterns as Rancher Fleet does: a pattern
// equal to the value matches, otherwise each is a regular expression that
// must match the whole value (^(?:p)$). An invalid pattern refuses, naming
// its Policy, unless another pattern already matched verbatim. shown is
// the value as messages may quote it (redacted).
func matchAny(field, shown, value, listField string, patterns []pattern) error {
	if value == "" || len(patterns) == 0 {
		return nil
	}
	exprs := make([]string, len(patterns))
	for i, p := range patterns {
		if p.expr == value {
			return nil
		}
		exprs[i] = p.expr
	}
	for _, p := range patterns {
		re, err := regexp.Compile("^(?:" + p.expr + ")$")
		if err != nil {
			return refuse("Policy %s: invalid %s entry %q: %v", p.policy, listField, p.expr, err)
		}
		if re.MatchString(value) {
			return nil
		}
	}
	policies := make([]string, 0, len(patterns))
	for _, p := range patterns {
		if !slices.Contains(policies, p.policy) {
			policies = append(policies, p.policy)
		}
	}
	return refuse("%s %q is not allowed by Policy %s: it matches none of %s %q", field, shown, strings.Join(policies, ", "), listField, exprs)
}

// RedactURL masks the user information of a URL (redact.URL) so that a
// refusal can say which URL it refused without quoting credentials written
// into it. It stays for the callers outside this package.
func RedactURL(u string) string {
	return redact.URL(u)
}
