package payload

import (
	"strings"
)

// NormalizeURL reduces a git URL to "host/path" so that the https, ssh and
// scp-like forms of one repository compare equal: scheme, user info, port,
// a trailing ".git" and "/" are dropped and the result is lower-cased.
// Bitbucket Server's "/scm/" prefix and Azure DevOps' ssh form
// (ssh.dev.azure.com:v3/org/project/repo) are mapped to their https forms.
func NormalizeURL(u string) string {
	s := strings.TrimSpace(strings.ToLower(u))
	scheme := ""
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, s = s[:i], s[i+3:]
	}
	// User info ends at the last '@' before the first '/'.
	slash := strings.Index(s, "/")
	hostPart := s
	if slash >= 0 {
		hostPart = s[:slash]
	}
	if at := strings.LastIndex(hostPart, "@"); at >= 0 {
		s = s[at+1:]
	}
	host, path := s, ""
	if scheme == "" {
		// scp-like host:path, unless the colon is a port before a slash.
		if c := strings.Index(s, ":"); c >= 0 && (slash < 0 || c < strings.Index(s, "/")) {
			host, path = s[:c], s[c+1:]
			if isPort(path) {
				host, path = s, ""
			}
		}
	}
	if path == "" && host == s {
		if i := strings.Index(s, "/"); i >= 0 {
			host, path = s[:i], s[i+1:]
		}
	}
	if c := strings.LastIndex(host, ":"); c >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:c]
	}
	path = strings.Trim(path, "/")
	path = strings.TrimSuffix(path, ".git")
	path = strings.TrimPrefix(path, "scm/")
	if host == "ssh.dev.azure.com" && strings.HasPrefix(path, "v3/") {
		parts := strings.Split(strings.TrimPrefix(path, "v3/"), "/")
		if len(parts) == 3 {
			host, path = "dev.azure.com", parts[0]+"/"+parts[1]+"/_git/"+parts[2]
		}
	}
	return host + "/" + path
}

// isPort reports whether s starts with a port number followed by "/" or
// nothing (so "host:22/path" is a port, "host:org/repo" a path).
func isPort(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i > 0 && (i == len(s) || s[i] == '/')
}
