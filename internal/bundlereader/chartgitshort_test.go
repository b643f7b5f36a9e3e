package bundlereader

import (
	"context"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestExpandGitShorthand: go-getter's GitHub, GitLab and Bitbucket
// shorthands, which Rancher Fleet accepts as helm.chart, are git
// repositories over HTTPS; path elements after owner/repository are the
// chart's directory.
func TestExpandGitShorthand(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{in: "github.com/org/repo//chart", want: "git::https://github.com/org/repo.git//chart", ok: true},
		{in: "github.com/org/repo//charts/app?ref=v1.2.0", want: "git::https://github.com/org/repo.git//charts/app?ref=v1.2.0", ok: true},
		{in: "github.com/org/repo.git?ref=main&depth=1", want: "git::https://github.com/org/repo.git?ref=main&depth=1", ok: true},
		{in: "github.com/org/repo/charts/app", want: "git::https://github.com/org/repo.git//charts/app", ok: true},
		{in: "gitlab.com/group/repo//chart", want: "git::https://gitlab.com/group/repo.git//chart", ok: true},
		{in: "bitbucket.org/team/repo//chart?ref=v2", want: "git::https://bitbucket.org/team/repo.git//chart?ref=v2", ok: true},
		{in: "github.com/org", ok: false},
		{in: "github.com//repo", ok: false},
		{in: "charts/github.com/org/repo", ok: false},
		{in: "example.com/org/repo", ok: false},
		{in: "https://github.com/org/repo", ok: false},
	} {
		got, ok := expandGitShorthand(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	// The expansion is a source parseGitChart reads.
	g, _ := expandGitShorthand("github.com/org/repo//charts/app?ref=v1&depth=1")
	src, err := parseGitChart(g)
	if err != nil || src != (gitChart{url: "https://github.com/org/repo.git", dir: "charts/app", ref: "v1"}) {
		t.Errorf("parseGitChart(%s) = %+v, %v", g, src, err)
	}
}

// TestResolveGitShorthand: resolve sends a shorthand to git (here with a
// cancelled context, so nothing leaves the machine) unless the bundle has
// a directory of that path, which stays a local chart as in Rancher Fleet.
func TestResolveGitShorthand(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"github.com/org/local/Chart.yaml":       "apiVersion: v2\nname: local\nversion: 0.1.0\n",
		"github.com/org/local/templates/a.yaml": "kind: ConfigMap\n",
	})
	fs, err := newFS(dir, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	files, err := fs.loadDir(fs.root)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cf, err := newChartFetcher(ctx, HelmAuth{}, "", DefaultLimits, fs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ chart, wantErr, wantChart string }{
		{chart: "github.com/org/repo//chart", wantErr: "https://github.com/org/repo.git"},
		{chart: "git::https://example.com/org/repo.git//chart?ref=v1&depth=1", wantErr: "https://example.com/org/repo.git"},
		{chart: "github.com/org/local", wantChart: "github.com/org/local"},
	} {
		h := &fleet.HelmOptions{Chart: tc.chart}
		err := cf.resolve(h, fs.root, &files)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "not found") || strings.Contains(err.Error(), "unsupported")):
			t.Errorf("%s: err = %v, want a git error naming %s", tc.chart, err, tc.wantErr)
		case tc.wantChart != "" && (err != nil || h.Chart != tc.wantChart):
			t.Errorf("%s: chart %q, err %v; want the local chart", tc.chart, h.Chart, err)
		}
	}
}
