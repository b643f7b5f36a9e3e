package helmop

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/bundlereader"
	"github.com/fleetgo/fleet/internal/gitops/git"
)

// matchNothing is the credential scope of a chart whose host cannot be
// told: no URL matches it, so the helm credentials go nowhere rather than
// anywhere.
const matchNothing = `[^\x00-\x{10FFFF}]`

// userInfo is the optional user part before a host in a credential scope:
// it may not hold the characters that end a URL's authority nor another
// "@", so the host after it is the one a client connects to
// (https://github.com@evil.example/ is evil.example, and matches neither
// the scope of github.com nor, through the user part, any other).
const userInfo = `([^/?#@\s]*@)?`

// chartSource is h with a GitHub, GitLab or Bitbucket shorthand chart
// (without helm.repo) written as the git:: source it stands for, expanded
// by the bundle reader's own function so that sameHost scopes the
// credentials to the URL the reader fetches; h itself when there is
// nothing to expand.
func chartSource(h *fleet.HelmOptions) *fleet.HelmOptions {
	if h == nil || h.Repo != "" {
		return h
	}
	g, ok := bundlereader.ExpandGitShorthand(h.Chart)
	if !ok {
		return h
	}
	out := h.DeepCopy()
	out.Chart = g
	return out
}

// sameHost is the helm repo URL regex of a HelmOp: only URLs on the server
// of the chart's repository (helm.repo, else helm.chart: http(s), oci://,
// git:: over HTTP(S) or SSH, scp-like user@host:path, a GitHub shorthand)
// match it, with the chart's scheme, host and port (git.HostPort's reading:
// a URL without a port is on its scheme's default port, so https://host
// and https://host:443 match each other, and an scp-like git@host:path is
// port 22, never host:2222:path) and any user, so that the credentials of
// helmSecretName (password or SSH key) are never sent to another server
// an index or a chart points a download at. The bundle reader matches it
// against the repository, registry or git URL as written (an SSH one with
// its git@ user) and against dependency repositories. A chart whose server
// cannot be told gets matchNothing.
func sameHost(h *fleet.HelmOptions) string {
	h = chartSource(h)
	if h == nil {
		return matchNothing
	}
	raw := h.Repo
	if raw == "" {
		raw = h.Chart
	}
	raw = strings.TrimPrefix(raw, "git::")
	host, port, err := git.HostPort(raw)
	if err != nil {
		return matchNothing
	}
	if scheme := git.URLScheme(raw); scheme != "" {
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		return "(?i)^" + regexp.QuoteMeta(scheme) + "://" + userInfo + regexp.QuoteMeta(host) + urlPort(scheme, port) + "(/|$)"
	}
	// scp-like: only with a user, as the bundle reader takes it for SSH
	// (git.IsSSH); the scope then matches scp-like URLs only.
	if !git.IsSSH(raw) {
		return matchNothing
	}
	scope := "(?i)^([^@/:\\s]+@)?" + regexp.QuoteMeta(host) + ":"
	if port == git.DefaultPort("ssh") {
		return scope + "(" + scpZeros(port) + "22:|" + scpNoPort + ")"
	}
	return scope + scpZeros(port) + port + `:[^\\]`
}

// scpZeros matches the leading zeros go-git still reads as part of an
// scp-like port before port (it reads one to five digits: 0022 is port 22,
// 0000022 is no port at all), so that a chart written git@host:0022:path
// matches its own scope as HostPort reads it.
func scpZeros(port string) string {
	if n := 5 - len(port); n > 0 {
		return fmt.Sprintf("0{0,%d}", n)
	}
	return ""
}

// urlPort is the part of a URL scope after the host: a port written out,
// also optional when it is the scheme's default (https://host is
// https://host:443), none when the scheme has no default and the chart
// names none.
func urlPort(scheme, port string) string {
	switch port {
	case "":
		return ""
	case git.DefaultPort(scheme):
		return "(:0*" + port + ")?"
	}
	// Leading zeros: https://host:0443/ is port 443 to net/url and to
	// HostPort, so it is in the scope of https://host.
	return ":0*" + port
}

// scpNoPort matches the start of an scp-like path that go-git does not
// read as a port (one to five digits, ":" and a path other than "\..."):
// a path starting with a non-digit, with digits followed by anything but
// ":" or by nothing, or with six digits or more. So the scope of
// git@host:org/repo (port 22) matches git@host:1password/repo but not
// git@host:2222:org/repo. RE2 has no look-ahead to say it shorter.
const scpNoPort = `[^0-9]|[0-9]{1,5}([^0-9:]|$)|[0-9]{6}`

// configMapKnownHosts gives auth, when its helm Secret has no known_hosts,
// those of the known-hosts ConfigMap of the manager's namespace (the
// public git hosts' keys and the chart's additionalKnownHosts), in the
// order GitRepos use for their git:: charts and as Rancher Fleet does, so
// an SSH chart source verifies its server without copying known_hosts
// into every helm Secret. The ConfigMap is read only when an SSH key is
// set: without one no SSH source can be read. No ConfigMap leaves auth
// without known hosts, and the bundle reader's error then names the server
// and where its key may be listed.
func (r *Reconciler) configMapKnownHosts(ctx context.Context, auth *bundlereader.HelmAuth) error {
	ns := r.Opts.SystemNamespace
	if ns == "" || len(auth.SSHPrivateKey) == 0 || len(auth.SSHKnownHosts) > 0 {
		return nil
	}
	kh, err := git.ReadKnownHostsConfigMap(ctx, r.APIReader, ns)
	if err != nil {
		return err
	}
	auth.SSHKnownHosts = kh
	return nil
}
