package bundlereader

import (
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// noKeyMaterial fails when msg holds any line of the PEM key (or its
// armour): an error may end up in a GitRepo's status and in logs.
func noKeyMaterial(t *testing.T, msg string, keys ...[]byte) {
	t.Helper()
	if strings.Contains(msg, "PRIVATE KEY-----") {
		t.Fatalf("key armour in the error: %s", msg)
	}
	for _, key := range keys {
		for _, line := range strings.Split(string(key), "\n") {
			if len(line) > 8 && !strings.HasPrefix(line, "-----") && strings.Contains(msg, line) {
				t.Fatalf("key material in the error: %s", msg)
			}
		}
	}
}

// TestChartFromGitOverSSH: a git:: chart on an SSH server is read with the
// helm SSH key, the server checked against the helm known hosts; every
// way of getting the key or the host wrong is refused with an error that
// says what is missing and holds no key material.
func TestChartFromGitOverSSH(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "charts")
	repo.Commit("master", map[string]string{
		"charts/app/Chart.yaml":        "apiVersion: v2\nname: app\nversion: 1.0.0\n",
		"charts/app/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  v: one\n",
	})
	repo.Tag("v1.0.0")
	repo.Commit("master", map[string]string{"charts/app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 1.1.0\n"})
	srv := gittest.NewSSHServer(t, root)
	other := gittest.NewSSHServer(t, t.TempDir())
	chart := "git::" + srv.URLFor(repo) + "//charts/app?ref=v1.0.0"
	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + chart + "\n"})
	good := HelmAuth{SSHPrivateKey: srv.ClientKeyPEM, SSHKnownHosts: srv.KnownHosts}

	for name, opts := range map[string]Options{
		"key and known hosts": {Auth: good},
		// As in Rancher Fleet, the regex sees helm.chart as written;
		// it also sees the repository URL fetched.
		"regex allows it":  {Auth: good, HelmRepoURLRegex: "^git::ssh://git@127\\.0\\.0\\.1"},
		"regex on the URL": {Auth: good, HelmRepoURLRegex: "^ssh://git@127\\.0\\.0\\.1"},
		// Known hosts name servers, not credentials: a per-path
		// entry's key is checked against the general known hosts.
		"by path": {Auth: HelmAuth{SSHKnownHosts: srv.KnownHosts}, AuthByPath: map[string]HelmAuth{".": {SSHPrivateKey: srv.ClientKeyPEM}}},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := readOne(t, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			mustHaveChart(t, b, b.Spec.Helm, "app", "1.0.0")
		})
	}

	host := strings.Fields(string(srv.KnownHosts))[0]
	otherHostKey := strings.SplitN(strings.TrimSpace(string(other.KnownHosts)), " ", 2)[1]
	for name, tc := range map[string]struct {
		auth  HelmAuth
		regex string
		want  string
	}{
		"no key":         {auth: HelmAuth{SSHKnownHosts: srv.KnownHosts}, want: "no SSH private key is set"},
		"wrong key":      {auth: HelmAuth{SSHPrivateKey: other.ClientKeyPEM, SSHKnownHosts: srv.KnownHosts}, want: "unable to authenticate"},
		"not a key":      {auth: HelmAuth{SSHPrivateKey: []byte("not-a-key-but-secret-bytes"), SSHKnownHosts: srv.KnownHosts}, want: "ssh-privatekey"},
		"no known hosts": {auth: HelmAuth{SSHPrivateKey: srv.ClientKeyPEM}, want: "needs known_hosts"},
		"unknown host key": {auth: HelmAuth{SSHPrivateKey: srv.ClientKeyPEM, SSHKnownHosts: []byte(host + " " + otherHostKey + "\n")},
			want: "host key"},
		"regex refuses": {auth: good, regex: "^https://", want: "regex does not allow"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := readOne(t, dir, Options{Auth: tc.auth, HelmRepoURLRegex: tc.regex})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			noKeyMaterial(t, err.Error(), srv.ClientKeyPEM, other.ClientKeyPEM, []byte("not-a-key-but-secret-bytes"))
		})
	}
}

// TestParseGitChartSCP: the scp form user@host:path takes a directory and
// a ref like a URL does, and the directory never swallows the host.
func TestParseGitChartSCP(t *testing.T) {
	for in, want := range map[string]gitChart{
		"git::git@host:org/charts.git//charts/app?ref=v1.2.0": {url: "git@host:org/charts.git", dir: "charts/app", ref: "v1.2.0"},
		"git::git@host:org/charts.git?ref=main":               {url: "git@host:org/charts.git", ref: "main"},
		"git::git@host:charts.git":                            {url: "git@host:charts.git"},
		"git::ssh://git@host:2222/org/charts.git//app":        {url: "ssh://git@host:2222/org/charts.git", dir: "app"},
	} {
		if got, err := parseGitChart(in); err != nil || got != want {
			t.Errorf("%s = %+v, %v; want %+v", in, got, err, want)
		}
	}
}
