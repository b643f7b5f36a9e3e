package target

import (
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestPolicyRefusalHidesUnencodedPassword: a refused repository URL whose
// password holds an unencoded '/', '?' or '#' is named without it.
func TestPolicyRefusalHidesUnencodedPassword(t *testing.T) {
	s := CombinePolicies([]fleet.Policy{policy("p", func(p *fleet.Policy) {
		p.GitRepo = &fleet.GitRepoPolicy{AllowedRepoPatterns: []string{`https://github\.com/.*`}}
	})})
	for _, repo := range []string{
		"https://codecommit-user:AbC/dEf+gh1@git-codecommit.example.com/v1/repos/app",
		"https://user:AbC?dEf+gh1@git.example.com/r.git",
		"https://user:AbC#dEf+gh1@git.example.com/r.git",
	} {
		_, err := s.AuthorizeGitRepo(&fleet.GitRepoSpec{Repo: repo})
		checkRefusal(t, err, []string{"spec.repo", "***@git"}, "AbC")
		if strings.Contains(err.Error(), "dEf") {
			t.Errorf("refusal quotes the password: %v", err)
		}
	}
}
