package helmop

import (
	"net/url"
	"path"
	"regexp"
	"strings"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
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

// gitShorthands are the hosts of go-getter's shorthands
// (<host>/<owner>/<repository>[//<directory>][?ref=…]) that Rancher Fleet
// resolves to a git repository over HTTPS, as the bundle reader does for
// a fleet.yaml chart.
var gitShorthands = []string{"github.com/", "gitlab.com/", "bitbucket.org/"}

// gitShorthand turns a shorthand chart such as github.com/org/repo//chart?ref=v1
// into the git:: source the bundle reader reads
// (git::https://github.com/org/repo.git//chart?ref=v1), as go-getter's
// detectors and the reader's expansion for fleet.yaml do: path elements
// after the repository are its directory. The reader keeps a shorthand
// that names a directory of the bundle as a local chart; a HelmOp has no
// bundle directory, so for it the shorthand is always git. ok is false
// for anything else.
func gitShorthand(s string) (string, bool) {
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

// chartSource is h with a shorthand chart (without helm.repo) written as
// the git:: source it stands for, which the bundle reader accepts for a
// HelmOp; h itself when there is nothing to expand.
func chartSource(h *fleet.HelmOptions) *fleet.HelmOptions {
	if h == nil || h.Repo != "" {
		return h
	}
	g, ok := gitShorthand(h.Chart)
	if !ok {
		return h
	}
	out := h.DeepCopy()
	out.Chart = g
	return out
}

// sameHost is the helm repo URL regex of a HelmOp: only URLs on the host
// of the chart's repository (helm.repo, else helm.chart: http(s), oci://,
// git:: over HTTP(S) or SSH, scp-like user@host:path, a GitHub shorthand)
// match it, with the chart's scheme and port and any user, so that the
// credentials of helmSecretName (password or SSH key) are never sent to
// another host an index or a chart points a download at. The bundle
// reader matches it against the repository, registry or git URL as
// written (an SSH one with its git@ user) and against dependency
// repositories. A chart whose host cannot be told gets matchNothing.
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
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return matchNothing
		}
		return "(?i)^" + regexp.QuoteMeta(u.Scheme) + "://" + userInfo + regexp.QuoteMeta(u.Host) + "(/|$)"
	}
	if !git.IsSSH(raw) {
		return matchNothing
	}
	// scp-like [user@]host:[port:]path, read as go-git does: the user ends
	// at the first "@", the host at the next ":".
	at := strings.Index(raw, "@")
	host, rest, _ := strings.Cut(raw[at+1:], ":")
	if host == "" || strings.ContainsAny(host, "/@ \t") {
		return matchNothing
	}
	if port, _, ok := strings.Cut(rest, ":"); ok && port != "" && len(port) <= 5 && strings.Trim(port, "0123456789") == "" {
		host += ":" + port
	}
	return "(?i)^([^@/:\\s]+@)?" + regexp.QuoteMeta(host) + ":"
}
