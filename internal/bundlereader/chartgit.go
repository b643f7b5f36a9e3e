package bundlereader

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/git"
)

// gitChart is a helm.chart of the form Fleet accepts through go-getter:
// git::<repository URL>[//<directory>][?ref=<branch, tag or commit>].
type gitChart struct {
	url, dir, ref string
}

// gitShorthands are the hosts whose go-getter shorthand
// (<host>/<owner>/<repository>[//<directory>][?ref=…]) Rancher Fleet
// resolves to a git repository over HTTPS.
var gitShorthands = []string{"github.com/", "gitlab.com/", "bitbucket.org/"}

// ExpandGitShorthand turns a go-getter shorthand such as
// github.com/org/repo//chart?ref=v1 into its git:: form
// (git::https://github.com/org/repo.git//chart?ref=v1), as go-getter's
// GitHub, GitLab and Bitbucket detectors do: path elements after the
// repository are its directory. ok is false for anything else. A
// fleet.yaml chart naming a directory of the bundle stays local (resolve
// decides); a HelmOp has no bundle directory, so for it a shorthand is
// always git. Exported so that the HelmOp controller scopes a shorthand
// chart's credentials to the very URL this reader fetches.
func ExpandGitShorthand(s string) (string, bool) { return expandGitShorthand(s) }

func expandGitShorthand(s string) (string, bool) {
	host := ""
	for _, h := range gitShorthands {
		if strings.HasPrefix(s, h) {
			host = h
		}
	}
	if host == "" {
		return "", false
	}
	rest, query, hasQuery := strings.Cut(s, "?")
	repoPath, dir, hasDir := strings.Cut(rest, "//")
	parts := strings.Split(repoPath, "/")
	if len(parts) < 3 || parts[1] == "" || parts[2] == "" {
		return "", false
	}
	if len(parts) > 3 {
		dir = path.Join(append(parts[3:], dir)...)
		hasDir = dir != ""
	}
	out := "git::https://" + strings.Join(parts[:3], "/")
	if !strings.HasSuffix(out, ".git") {
		out += ".git"
	}
	if hasDir {
		out += "//" + dir
	}
	if hasQuery {
		out += "?" + query
	}
	return out, true
}

func parseGitChart(s string) (gitChart, error) {
	raw := strings.TrimPrefix(s, "git::")
	var ref string
	if i := strings.LastIndex(raw, "?"); i >= 0 {
		q, err := url.ParseQuery(raw[i+1:])
		if err != nil {
			return gitChart{}, fmt.Errorf("helm.chart %q: %w", redact(s), err)
		}
		for k := range q {
			// depth (go-getter's shallow clone) is accepted and has no
			// effect: the chart is always fetched at one commit.
			if k != "ref" && k != "depth" {
				return gitChart{}, fmt.Errorf("helm.chart %q: unsupported parameter %q (only ref and depth)", redact(s), k)
			}
		}
		ref, raw = q.Get("ref"), raw[:i]
	}
	// The directory follows the first "//" after the scheme's.
	var dir string
	from := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		from = i + 3
	}
	if i := strings.Index(raw[from:], "//"); i >= 0 {
		dir, raw = raw[from+i+2:], raw[:from+i]
	}
	escapes := false
	for _, part := range strings.Split(dir, "/") {
		escapes = escapes || part == ".."
	}
	dir = path.Clean("/" + dir)[1:]
	if raw == "" || escapes {
		return gitChart{}, fmt.Errorf("helm.chart %q: want git::<repository URL>[//<directory>][?ref=<ref>]", redact(s))
	}
	return gitChart{url: raw, dir: dir, ref: ref}, nil
}

// gitCredentials are the credentials of a git:: source: over SSH (ssh://
// or user@host:path) the helm SSH private key, with the helm known hosts,
// else the username and password over HTTP(S). Either is used only when
// allowed, which says whether helmRepoURLRegex allows it for the chart
// (chartFetcher.regexAllows: matched against helm.chart as written, git::
// prefix included, as in Rancher Fleet, and against the repository URL).
// An SSH source without a
// usable key is refused here, naming where the key comes from; the key
// never appears in an error. The server's host key is left to the git
// client, so that a chart source follows the same host key policy as the
// GitRepos' clones: strict against known_hosts, unless the process turned
// host key checks off (git.SetInsecureSkipHostKeyChecks, the manager's
// insecureSkipHostKeyChecks); hostKeyError explains its refusals.
func (cf *chartFetcher) gitCredentials(src gitChart, allowed bool) (git.Credentials, error) {
	if !git.IsSSH(src.url) {
		if !allowed {
			return git.Credentials{}, nil
		}
		if user, pass, ok := cf.credentialsFor(src.url, src.url); ok {
			return git.Credentials{Username: user, Password: pass}, nil
		}
		return git.Credentials{}, nil
	}
	if len(cf.auth.SSHPrivateKey) == 0 || !allowed {
		why := "no SSH private key is set"
		if len(cf.auth.SSHPrivateKey) > 0 {
			why = "the helm repo URL regex does not allow the helm credentials for it"
		}
		return git.Credentials{}, fmt.Errorf("helm.chart %s: an SSH git source needs the helm SSH private key, but %s "+
			"(ssh-privatekey of the helm secret, fleet apply --ssh-privatekey-file)", redact(src.url), why)
	}
	// Parsed here so that the only credential error the git client can
	// still return for this source is about known_hosts (hostKeyError).
	if _, err := ssh.ParseRawPrivateKey(cf.auth.SSHPrivateKey); err != nil {
		return git.Credentials{}, fmt.Errorf("helm.chart %s: the helm SSH private key (ssh-privatekey) cannot be used: %v",
			redact(src.url), err)
	}
	return git.Credentials{SSHKey: cf.auth.SSHPrivateKey, KnownHosts: cf.auth.SSHKnownHosts}, nil
}

// knownHostsSources says where the known hosts of git:: chart sources come
// from, for errors that ask for them.
const knownHostsSources = "known_hosts of the helm Secret, else of the GitRepo's client Secret (GitRepos only), else of the manager's ConfigMap " +
	git.KnownHostsConfigMap + "; env FLEET_KNOWN_HOSTS or SSH_KNOWN_HOSTS for fleet apply"

// hostKeyError turns the git client's refusal of an SSH server into an
// error that names the server (host:port) and says what is wrong with its
// host key: no known_hosts at all, a host they do not list, or a key that
// differs from theirs. Other errors are returned as they are.
func (cf *chartFetcher) hostKeyError(src gitChart, err error) error {
	if !git.IsSSH(src.url) {
		return err
	}
	server := sshServer(src.url)
	var keyErr *knownhosts.KeyError
	switch {
	case len(cf.auth.SSHKnownHosts) == 0 && errors.Is(err, git.ErrBadCredentials):
		// The git client's message speaks of a GitRepo's client Secret.
		return fmt.Errorf("an SSH git source needs known_hosts to verify the SSH server %s (%s): %w", server, knownHostsSources, git.ErrBadCredentials)
	case !errors.Is(err, git.ErrHostKey):
		return err
	case errors.As(err, &keyErr) && len(keyErr.Want) > 0, strings.Contains(err.Error(), "key mismatch"):
		return fmt.Errorf("the SSH server %s presented a host key that does not match its known_hosts entry: %w", server, err)
	default:
		return fmt.Errorf("the SSH server %s is not in known_hosts (%s): %w", server, knownHostsSources, err)
	}
}

// sshServer is host:port of an SSH URL (ssh:// or user@host:path), as
// known_hosts lists servers ([2001:db8::1]:22 for an IPv6 literal); the
// URL, redacted, when it cannot be parsed. git.HostPort reads it, the
// reading that also scopes a HelmOp's credentials, so the server an error
// names is the one the key was scoped to.
func sshServer(u string) string {
	host, port, err := git.HostPort(u)
	if err != nil {
		return redact(u)
	}
	return net.JoinHostPort(host, port)
}

// fromGit checks out a chart from a git repository: the commit ref names
// (a branch, tag or commit; the default branch without one), the chart in
// its directory, with the credentials of gitCredentials and the helm CA
// bundle and TLS setting. The bundle records the chart under
// .chart/<key of URL, directory, commit>. allowed is regexAllows of the
// chart as written (before a shorthand was expanded).
func (cf *chartFetcher) fromGit(h *fleet.HelmOptions, allowed bool, files *[]file) error {
	src, err := parseGitChart(h.Chart)
	if err != nil {
		return err
	}
	// The chart as written (Rancher's subject) or the repository URL
	// fetched (this project's earlier one): see regexAllows.
	allowed = allowed || cf.regexAllows(h, src.url)
	remote := git.Remote{URL: src.url, CABundle: cf.auth.CABundle, InsecureSkipTLS: cf.auth.InsecureSkipTLS}
	if remote.Credentials, err = cf.gitCredentials(src, allowed); err != nil {
		return err
	}
	remote.Revision = src.ref
	if remote.Revision == "" {
		remote.Revision = "HEAD"
	}
	commit, err := git.LatestCommit(cf.ctx, remote)
	if err != nil {
		return fmt.Errorf("helm.chart %s: %w", redact(src.url), cf.hostKeyError(src, err))
	}
	key := sourceKey("git", src.url, src.dir, commit)
	if done, ok := cf.fetched[key]; ok {
		h.Chart, h.Version = done.path, done.version
		return nil
	}
	if err := cf.download("helm.chart " + redact(src.url)); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "fleet-chart-git-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	remote.Revision = commit
	if _, err := git.Fetch(cf.ctx, remote, work, git.FetchOptions{Limits: git.Limits{
		MaxBytes: cf.limits.MaxTotalSize, MaxFiles: cf.limits.MaxFiles,
	}}); err != nil {
		return fmt.Errorf("helm.chart %s: %w", redact(src.url), cf.hostKeyError(src, err))
	}
	checkout, err := newFS(filepath.Join(work, "source"), cf.limits)
	if err != nil {
		return err
	}
	abs := filepath.Join(checkout.root, filepath.FromSlash(src.dir))
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return fmt.Errorf("helm.chart %s: no directory %q at %s", redact(src.url), src.dir, commit)
	}
	// The chart's files count against the Read's budget until the bundle
	// is built, like an extracted chart's (chartFetcher.charge).
	checkout.readSize = cf.fs.readSize
	chartFiles, err := checkout.loadDir(abs)
	cf.charged += checkout.readSize - cf.fs.readSize
	cf.fs.readSize = checkout.readSize
	if err != nil {
		return fmt.Errorf("helm.chart %s: %w", redact(src.url), err)
	}
	meta := &chartv2.Metadata{}
	if err := yaml.Unmarshal(fileContent(chartFiles, "Chart.yaml"), meta); err != nil || meta.Name == "" {
		return fmt.Errorf("helm.chart %s: no valid Chart.yaml in %q at %s", redact(src.url), src.dir, commit)
	}
	prefix := path.Join(chartDir, key, meta.Name)
	for _, f := range chartFiles {
		*files = append(*files, file{name: path.Join(prefix, f.name), content: f.content})
	}
	cf.fetched[key] = fetchedChart{path: prefix, version: meta.Version}
	h.Chart, h.Version = prefix, meta.Version
	return cf.dependencies(h, prefix, "", files)
}
