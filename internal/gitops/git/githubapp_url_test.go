package git

import (
	"errors"
	"testing"
)

// TestGitHubAPIURL: where the App's JWT may go for a repository. Only
// api.github.com for github.com, or an explicitly configured API on the
// repository's own host (or its api. subdomain); never a host taken from
// the repo URL alone.
func TestGitHubAPIURL(t *testing.T) {
	for _, tc := range []struct {
		repo, configured, want string
		custom                 bool
	}{
		{repo: "https://github.com/org/repo.git", want: "https://api.github.com"},
		{repo: "https://www.github.com/org/repo", want: "https://api.github.com"},
		{repo: "https://GitHub.com/org/repo", want: "https://api.github.com"},
		{repo: "https://ghes.example.com/org/repo.git", configured: "https://ghes.example.com/api/v3/", want: "https://ghes.example.com/api/v3", custom: true},
		{repo: "https://acme.ghe.com/org/repo.git", configured: "https://api.acme.ghe.com", want: "https://api.acme.ghe.com", custom: true},
		{repo: "https://github.com/org/repo", configured: "https://api.github.com", want: "https://api.github.com", custom: true},
		// Refused: a host that is not github.com without configuration,
		// github.com look-alikes, plain http, an API elsewhere.
		{repo: "https://evil.example/org/repo"},
		{repo: "https://github.com.evil.example/org/repo"},
		{repo: "https://github.com:8443/org/repo"},
		{repo: "http://github.com/org/repo"},
		{repo: "git@github.com:org/repo.git"},
		{repo: "https://evil.example/org/repo", configured: "https://api.github.com"},
		{repo: "https://ghes.example.com/org/repo", configured: "http://ghes.example.com/api/v3"},
		{repo: "https://ghes.example.com/org/repo", configured: "https://user:pw@ghes.example.com/api/v3"},
		{repo: "https://ghes.example.com/org/repo", configured: "https://ghes.example.com.evil.example/api/v3"},
	} {
		got, custom, err := gitHubAPIURL(tc.repo, tc.configured)
		if tc.want == "" {
			if !errors.Is(err, ErrBadCredentials) {
				t.Errorf("%s (api %q): got %q, %v; want refused", tc.repo, tc.configured, got, err)
			}
			continue
		}
		if err != nil || got != tc.want || custom != tc.custom {
			t.Errorf("%s (api %q) = %q, %v, %v; want %q, %v", tc.repo, tc.configured, got, custom, err, tc.want, tc.custom)
		}
	}
}
