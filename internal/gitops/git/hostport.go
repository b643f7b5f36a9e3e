package git

import (
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// defaultPorts are the ports HostPort fills in for a URL that names none.
// Only schemes whose port is beyond doubt are listed: an oci:// registry,
// for one, is HTTPS or plain HTTP depending on a client setting, so its
// port stays unknown unless the URL writes it.
var defaultPorts = map[string]string{"ssh": "22", "https": "443", "http": "80"}

// DefaultPort is the port HostPort gives a URL of scheme (lower case) that
// names no port: 22 for ssh (and scp-like URLs), 443 for https, 80 for
// http; "" for any other scheme.
func DefaultPort(scheme string) string { return defaultPorts[scheme] }

// scpLike is how go-git reads an scp-like URL, [user@]host:[port:]path
// (its internal/url, after git's urls.adoc): the user ends at the first
// "@", the host at the next ":", and one to five digits followed by ":"
// and a path are a port. The same expression here means HostPort names
// the server go-git dials, not one a differently written URL suggests.
var scpLike = regexp.MustCompile(`^(?:([^@]+)@)?([^:\s]+):(?:([0-9]{1,5}):)?([^\\].*)$`)

// errNoHost is HostPort's error for input that is not a URL with a host.
var errNoHost = errors.New("not a URL with a host (scheme://host/path or [user@]host:[port:]path)")

// HostPort is the server a git or SSH URL connects to, as go-git reads the
// URL: host without brackets (an IPv6 literal is "2001:db8::1", so
// net.JoinHostPort(host, port) is the address) and in lower case, since
// host names are case-insensitive; port in decimal without leading zeros,
// else the scheme's default (DefaultPort: ssh and scp-like 22, https 443,
// http 80), else "" for another scheme that names no port.
//
// A URL is scheme://[user@]host[:port]/path when its first ":" starts
// "://", else scp-like [user@]host:[port:]path, which is SSH (go-git's
// rule, so "host:2222:org/repo" is port 2222 and "host:org/repo" port 22).
// Credentials are scoped by what this returns, so anything that names no
// server beyond doubt is an error rather than a guess: no host, a file://
// URL, a port outside 1-65535, an scp-like host holding "@" (user@a@b:path
// would dial "a@b") or brackets (go-git reads no IPv6 literal in an
// scp-like URL; write ssh://[2001:db8::1]/path). The error never quotes
// the URL, which may carry a password.
func HostPort(rawURL string) (host, port string, err error) {
	if isSchemeURL(rawURL) {
		return urlHostPort(rawURL)
	}
	m := scpLike.FindStringSubmatch(rawURL)
	if m == nil {
		return "", "", errNoHost
	}
	// As go-git and git: a "/" before the first ":" makes a local path
	// (./dir:x), not a host.
	if before, _, _ := strings.Cut(rawURL, ":"); strings.Contains(before, "/") {
		return "", "", errNoHost
	}
	host = m[2]
	if strings.ContainsAny(host, "@[]") {
		return "", "", errors.New("scp-like URL: the part before the path is no host name go-git can dial")
	}
	port = m[3]
	if port == "" {
		port = defaultPorts["ssh"]
	}
	if port, err = checkPort(port); err != nil {
		return "", "", err
	}
	return strings.ToLower(host), port, nil
}

// URLScheme is the lower-case scheme of a URL HostPort reads as
// scheme://host…, "" for an scp-like URL (which is SSH) or anything else.
func URLScheme(rawURL string) string {
	if !isSchemeURL(rawURL) {
		return ""
	}
	scheme, _, _ := strings.Cut(rawURL, ":")
	return strings.ToLower(scheme)
}

// isSchemeURL is go-git's test for a URL with a scheme: its first ":"
// starts "://".
func isSchemeURL(raw string) bool {
	i := strings.Index(raw, ":")
	return i > 0 && strings.HasPrefix(raw[i:], "://")
}

func urlHostPort(raw string) (string, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// Not url.Error's text: it quotes the URL, and its reason may
		// quote part of a password (an invalid escape in the user info).
		return "", "", errors.New("not a valid URL")
	}
	if u.Scheme == "" || u.Scheme == "file" || u.Hostname() == "" {
		return "", "", errNoHost
	}
	port := u.Port()
	if port == "" {
		if port = defaultPorts[u.Scheme]; port == "" {
			return strings.ToLower(u.Hostname()), "", nil
		}
	}
	if port, err = checkPort(port); err != nil {
		return "", "", err
	}
	return strings.ToLower(u.Hostname()), port, nil
}

// checkPort is p (all digits) in canonical form, or an error when it is
// not a TCP port.
func checkPort(p string) (string, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", errors.New("port " + strconv.Quote(p) + " is not in 1-65535")
	}
	return strconv.Itoa(n), nil
}
