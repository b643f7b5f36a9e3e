package helmop

import (
	"regexp"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/bundlereader"
)

// TestSameHost: the credential scope of a HelmOp matches the URLs of its
// chart's own host, as the bundle reader writes them (an SSH URL with its
// user, a shorthand expanded to HTTPS), and no other host: not one whose
// name starts or ends with it, not one behind a user-info trick, not
// another scheme or port.
func TestSameHost(t *testing.T) {
	tests := []struct {
		name  string
		h     *fleet.HelmOptions
		match []string
		not   []string
	}{
		{name: "https repo", h: &fleet.HelmOptions{Repo: "https://charts.example.com/stable", Chart: "web"},
			match: []string{"https://charts.example.com/stable/index.yaml", "https://charts.example.com/charts/web-1.0.0.tgz",
				"https://charts.example.com", "https://fleet@charts.example.com/stable", "HTTPS://Charts.Example.com/stable",
				"https://charts.example.com:443/stable/index.yaml"},
			not: []string{"https://github.com/x/web-1.0.0.tgz", "https://charts.example.com.evil.io/index.yaml",
				"https://evilcharts.example.com/index.yaml", "https://evil.charts.example.com/index.yaml",
				"https://charts.example.com@evil.example/index.yaml", "https://charts.example.com:x@evil.example/",
				"https://a@charts.example.com@evil.example/", "http://charts.example.com/index.yaml",
				"https://charts.example.com:8443/index.yaml", "oci://charts.example.com/web"}},
		{name: "user-info trick in the chart", h: &fleet.HelmOptions{Chart: "https://github.com@evil.example/web-1.0.0.tgz"},
			match: []string{"https://github.com@evil.example/web-1.0.0.tgz", "https://evil.example/web-1.0.0.tgz"},
			not:   []string{"https://github.com/web-1.0.0.tgz", "https://github.com/org/repo.git"}},
		{name: "oci chart", h: &fleet.HelmOptions{Chart: "oci://registry.example:5000/charts/web"},
			match: []string{"oci://registry.example:5000/charts/web"},
			not:   []string{"oci://registry.example/charts/web", "oci://other.example:5000/charts/web", "https://registry.example:5000/v2/"}},
		{name: "oci repo", h: &fleet.HelmOptions{Repo: "oci://registry.example/charts", Chart: "web"},
			match: []string{"oci://registry.example/charts/web"},
			not:   []string{"oci://registry.example.evil.io/charts/web", "oci://registry.example:443/charts/web"}},
		{name: "git over https", h: &fleet.HelmOptions{Chart: "git::https://github.com/org/repo//chart?ref=v1"},
			match: []string{"https://github.com/org/repo", "https://x-access-token@github.com/org/repo"},
			not:   []string{"https://github.com.evil.io/org/repo", "ssh://git@github.com/org/repo", "https://gist.github.com/org/repo"}},
		{name: "git over ssh", h: &fleet.HelmOptions{Chart: "git::ssh://git@github.com/org/repo//chart?ref=v1"},
			match: []string{"ssh://git@github.com/org/repo", "ssh://github.com/org/repo", "ssh://deploy@GitHub.com/org/other", "ssh://git@github.com:22/org/repo"},
			not: []string{"ssh://git@github.com.evil.io/org/repo", "ssh://git@evilgithub.com/org/repo",
				"ssh://github.com@evil.example/org/repo", "ssh://git@github.com:2222/org/repo",
				"https://github.com/org/repo", "git@evil.example:org/repo"}},
		{name: "git over ssh with a port", h: &fleet.HelmOptions{Chart: "git::ssh://git@git.example:2222/org/repo"},
			match: []string{"ssh://git@git.example:2222/org/repo"},
			not:   []string{"ssh://git@git.example/org/repo", "ssh://git@git.example:22/org/repo"}},
		// Without a port an scp-like URL is port 22, as go-git dials it: a
		// path that starts with a port (host:2222:path) is another server.
		{name: "scp-like", h: &fleet.HelmOptions{Chart: "git::git@github.com:org/repo.git//charts/app?ref=v1"},
			match: []string{"git@github.com:org/repo.git", "deploy@github.com:org/other.git", "github.com:org/repo.git",
				"git@github.com:22:org/repo.git", "git@github.com:1password/repo.git", "git@github.com:123456:org/repo.git"},
			not: []string{"git@github.com.evil.io:org/repo.git", "git@evilgithub.com:org/repo.git",
				"github.com@evil.example:org/repo.git", "git@evil.example:github.com:org/repo.git",
				"ssh://git@evil.example/github.com:org", "https://github.com/org/repo.git",
				"git@github.com:2222:org/repo.git", "github.com:2222:org/repo.git", "git@github.com:1:org/repo.git"}},
		{name: "scp-like with a port", h: &fleet.HelmOptions{Chart: "git::git@git.example:2222:org/repo.git"},
			match: []string{"git@git.example:2222:org/repo.git", "deploy@GIT.example:2222:org/other.git"},
			not: []string{"git@git.example:org/repo.git", "git@git.example.evil.io:2222:org/repo.git",
				"git@git.example:22:org/repo.git", "git@git.example:22222:org/repo.git"}},
		{name: "scp-like with port 22 written out", h: &fleet.HelmOptions{Chart: "git::git@git.example:22:org/repo.git"},
			match: []string{"git@git.example:org/repo.git", "git@git.example:22:org/repo.git"},
			not:   []string{"git@git.example:2222:org/repo.git"}},
		{name: "ssh to an IPv6 literal", h: &fleet.HelmOptions{Chart: "git::ssh://git@[2001:db8::1]:2222/org/repo"},
			match: []string{"ssh://git@[2001:db8::1]:2222/org/repo"},
			not:   []string{"ssh://git@[2001:db8::1]/org/repo", "ssh://git@[2001:db8::10]:2222/org/repo", "ssh://git@[2001:db8::1]:22/org/repo"}},
		// A port written with leading zeros is the same port to every
		// client (net/url, go-git's one-to-five-digit scp-like port), so
		// a chart written that way matches its own scope and the same
		// server written without them, and no other port.
		{name: "https with a zero-padded port", h: &fleet.HelmOptions{Repo: "https://charts.example.com:0443/stable", Chart: "web"},
			match: []string{"https://charts.example.com:0443/stable/index.yaml", "https://charts.example.com/stable/index.yaml",
				"https://charts.example.com:443/x", "https://charts.example.com:00443/x"},
			not: []string{"https://charts.example.com:4430/x", "https://charts.example.com:8443/x", "https://charts.example.com:04431/x"}},
		{name: "oci with a zero-padded port", h: &fleet.HelmOptions{Chart: "oci://registry.example:05000/charts/web"},
			match: []string{"oci://registry.example:05000/charts/web", "oci://registry.example:5000/charts/web"},
			not:   []string{"oci://registry.example/charts/web", "oci://registry.example:50000/charts/web"}},
		{name: "ssh with a zero-padded port", h: &fleet.HelmOptions{Chart: "git::ssh://git@git.example:0022/org/repo"},
			match: []string{"ssh://git@git.example:0022/org/repo", "ssh://git@git.example/org/repo", "ssh://git@git.example:22/org/repo"},
			not:   []string{"ssh://git@git.example:2222/org/repo", "ssh://git@git.example:0222/org/repo"}},
		{name: "scp-like with a zero-padded port", h: &fleet.HelmOptions{Chart: "git::git@git.example:02222:org/repo.git"},
			match: []string{"git@git.example:02222:org/repo.git", "git@git.example:2222:org/repo.git"},
			// six digits are no port to go-git: a path on port 22
			not: []string{"git@git.example:002222:org/repo.git", "git@git.example:org/repo.git", "git@git.example:22222:org/repo.git"}},
		{name: "scp-like with port 22 zero-padded", h: &fleet.HelmOptions{Chart: "git::git@git.example:0022:org/repo.git"},
			match: []string{"git@git.example:0022:org/repo.git", "git@git.example:00022:org/repo.git", "git@git.example:org/repo.git", "git@git.example:22:org/repo.git"},
			not:   []string{"git@git.example:2222:org/repo.git", "git@git.example:0222:org/repo.git"}},
		{name: "github shorthand", h: &fleet.HelmOptions{Chart: "github.com/org/repo//charts/app?ref=v1"},
			match: []string{"https://github.com/org/repo.git", "https://github.com/other/dep"},
			not: []string{"https://github.com.evil.io/org/repo.git", "https://gitlab.com/org/repo.git",
				"http://github.com/org/repo.git", "ssh://git@github.com/org/repo.git", "https://github.com@evil.example/org/repo.git"}},
		{name: "gitlab shorthand", h: &fleet.HelmOptions{Chart: "gitlab.com/group/repo//chart"},
			match: []string{"https://gitlab.com/group/repo.git"},
			not:   []string{"https://github.com/group/repo.git"}},
	}
	for _, tc := range tests {
		re := regexp.MustCompile(sameHost(tc.h))
		for _, u := range tc.match {
			if !re.MatchString(u) {
				t.Errorf("%s: %s does not match %s", tc.name, u, re)
			}
		}
		for _, u := range tc.not {
			if re.MatchString(u) {
				t.Errorf("%s: %s matches %s", tc.name, u, re)
			}
		}
	}

	// Without a host to tell, the credentials go nowhere (not anywhere).
	anywhere := []string{"https://github.com/org/repo", "ssh://git@github.com/org/repo", "git@github.com:org/repo", "oci://r.example/c", "", "./local"}
	for _, h := range []*fleet.HelmOptions{nil, {Chart: "./local"}, {Chart: "git::file:///srv/charts"}, {Chart: "git::host:org/repo"}, {Chart: "git::https://%zz/"}} {
		re := regexp.MustCompile(sameHost(h))
		for _, u := range anywhere {
			if re.MatchString(u) {
				chart := "no helm options"
				if h != nil {
					chart = h.Chart
				}
				t.Errorf("%s: scope %q matches %q", chart, re, u)
			}
		}
	}
}

// TestGitShorthand: a shorthand chart without helm.repo is the HelmOp's
// chart source as the bundle reader's ExpandGitShorthand writes it (whose
// table, TestExpandGitShorthand in internal/bundlereader, is not repeated
// here), anything else is left as written, the spec is not changed and a
// chart name in helm.repo is never rewritten.
func TestGitShorthand(t *testing.T) {
	h := &fleet.HelmOptions{Chart: "github.com/org/repo//chart?ref=v1", Version: "1.x"}
	want, ok := bundlereader.ExpandGitShorthand(h.Chart)
	if got := chartSource(h); !ok || got.Chart != want || got.Version != "1.x" || h.Chart != "github.com/org/repo//chart?ref=v1" {
		t.Errorf("chartSource = %+v (spec now %+v): want the chart %q (%v), the spec unchanged", got, h, want, ok)
	}
	if got := chartSource(&fleet.HelmOptions{Chart: "https://github.com/org/repo"}); got.Chart != "https://github.com/org/repo" {
		t.Errorf("a URL was rewritten: %+v", got)
	}
	inRepo := &fleet.HelmOptions{Repo: "https://charts.example.com", Chart: "github.com/org/repo"}
	if got := chartSource(inRepo); got.Chart != inRepo.Chart {
		t.Errorf("a chart name in helm.repo was rewritten: %+v", got)
	}
}
