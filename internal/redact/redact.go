// Package redact masks the credentials written into URLs before they reach
// a message, a status, an event, a log line or a metric label. It is the
// one redactor of the manager's packages (bundle reader, git client,
// policies, metrics), so that a URL is masked the same way wherever it is
// shown, and it imports nothing of the project so that any package can use
// it.
package redact

import (
	"regexp"
	"strings"
)

// mask replaces the user information of a URL.
const mask = "***"

// schemeRE finds the start of a URL with a scheme ("https://",
// "oci://"...); go-getter's "git::" prefix is left before it.
var schemeRE = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://`)

// URL masks the user information of every URL with a scheme in s, which
// may be a single URL (also behind go-getter's "git::") or a text quoting
// URLs, such as an error message: "https://user:token@host/x" becomes
// "https://***@host/x". A token given as the user name alone is masked as
// well: it is as secret as a password. In a text a URL ends at white space,
// and at the quote that opened it when a quote (", ', `, <) stands right
// before it: a password may hold any of them unencoded (url.Parse accepts
// it), so a quote ends a URL only when the text opened one.
//
// A password is often not percent-encoded: AWS CodeCommit passwords are
// base64 and hold '/' and '+', and a '?', '#' or '@' may appear too. Such a
// URL does not parse (the text before the '/' reads as a host with an
// invalid port), so when what would be the host and port is not one, the
// user information is taken to run to the next '@' (to the last '@' before
// the next '/', '?' or '#' after it). A dotless host with a port followed
// by an '@' ("https://user:12/ab@host/x") is read the same way, even though
// "http://gitea:3000/r?ref=a@b" is then masked up to its last '@': masking
// too much of a rare URL is better than showing a password. A user name
// with a dot and a password starting with digits are not told from a host
// and its port ("oci://reg.example.com:5000/c@sha256:..." is common).
//
// scp-like SSH addresses (git@github.com:org/repo) have no scheme and are
// left as they are: their user is a login name, never a secret (SSH
// authenticates with a key).
func URL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	for {
		loc := schemeRE.FindStringIndex(s)
		if loc == nil {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:loc[1]])
		rest := s[loc[1]:]
		end := strings.IndexAny(rest, " \t\r\n")
		if end < 0 {
			end = len(rest)
		}
		if closing := closingQuote(s, loc[0]); closing != 0 {
			if q := strings.IndexByte(rest[:end], closing); q >= 0 {
				end = q
			}
		}
		if ui := userInfoEnd(rest[:end]); ui >= 0 {
			b.WriteString(mask)
			rest = rest[ui:] // from the '@'
		}
		s = rest
	}
}

// userInfoEnd is the index of the '@' ending the user information of u, a
// URL without its "scheme://", or -1 when u has none.
func userInfoEnd(u string) int {
	authority := u[:indexOr(u, "/?#", len(u))]
	at := strings.LastIndexByte(authority, '@')
	hostPort := authority[at+1:]
	var searchIn string
	switch {
	case !validHostPort(hostPort), suspiciousPort(hostPort):
		// A password with an unencoded '/', '?' or '#' cut the authority
		// short: the user information runs to a later '@'.
		searchIn = u[len(authority):]
	default:
		return at
	}
	next := strings.IndexByte(searchIn, '@')
	if next < 0 {
		return at
	}
	next += len(authority)
	host := u[next+1:]
	host = host[:indexOr(host, "/?#", len(host))]
	if k := strings.LastIndexByte(host, '@'); k >= 0 {
		next += 1 + k
	}
	return next
}

// validHostPort says whether s can be a host with an optional port: a
// port, when there is a ':' outside an IPv6 literal, is a non-empty number.
func validHostPort(s string) bool {
	if strings.HasPrefix(s, "[") {
		i := strings.IndexByte(s, ']')
		if i < 0 {
			return false
		}
		s = s[i+1:]
		if s == "" {
			return true
		}
		if s[0] != ':' {
			return false
		}
		return isPort(s[1:])
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return true
	}
	return !strings.Contains(s[:i], ":") && isPort(s[i+1:])
}

// suspiciousPort says whether s, a valid host:port, may rather be a user
// name and the digits a password starts with: a host without a dot that is
// neither localhost nor an IPv6 literal.
func suspiciousPort(s string) bool {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || strings.HasPrefix(s, "[") {
		return false
	}
	host := s[:i]
	return !strings.Contains(host, ".") && !strings.EqualFold(host, "localhost")
}

func isPort(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func indexOr(s, chars string, def int) int {
	if i := strings.IndexAny(s, chars); i >= 0 {
		return i
	}
	return def
}

// closingQuote is the quote that ends a URL starting at start in s, 0 when
// none opened it. go-getter's "git::" may stand between the quote and the
// scheme.
func closingQuote(s string, start int) byte {
	before := strings.TrimSuffix(s[:start], "git::")
	if before == "" {
		return 0
	}
	switch before[len(before)-1] {
	case '"':
		return '"'
	case '\'':
		return '\''
	case '`':
		return '`'
	case '<':
		return '>'
	}
	return 0
}
