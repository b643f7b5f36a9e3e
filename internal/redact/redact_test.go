package redact

import (
	"strings"
	"testing"
)

// TestURL: the user information of a URL goes, whatever it holds and
// however it is written, the rest of the URL stays, and scp-like SSH
// addresses are left alone.
func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://github.com/o/r.git", "https://github.com/o/r.git"},
		{"https://bob:hunter2@github.com/o/r.git", "https://***@github.com/o/r.git"},
		{"https://ghp_secret@github.com/o/r.git", "https://***@github.com/o/r.git"},
		{"http://ghp_SECRETTOKEN@127.0.0.1:45469/index.yaml", "http://***@127.0.0.1:45469/index.yaml"},
		{"https://bob:p@ss@github.com/o/r.git", "https://***@github.com/o/r.git"},
		{"ssh://git@github.com/o/r.git", "ssh://***@github.com/o/r.git"},
		{"oci://tok@reg.example.com/c?x=y@z", "oci://***@reg.example.com/c?x=y@z"},
		{"git::https://u:tok@github.com/o/r//chart?ref=v1", "git::https://***@github.com/o/r//chart?ref=v1"},
		{"https://fleet:s3cr3t%zz@charts.example.com/", "https://***@charts.example.com/"},
		{"https://[::1]:8443/x@y", "https://[::1]:8443/x@y"},
		{"https://u:p@[::1]:8443/x", "https://***@[::1]:8443/x"},
		// Unencoded '/', '?', '#' and '@' in a password.
		{"https://fleet:s3c/r3t@charts.example.com/x", "https://***@charts.example.com/x"},
		{"https://codecommit-user:AbC/dEf+gh1@git-codecommit.example.com/v1/repos/app", "https://***@git-codecommit.example.com/v1/repos/app"},
		{"https://user:pa?ss@host.example.com/r.git", "https://***@host.example.com/r.git"},
		{"https://user:pa#ss@host.example.com/r.git", "https://***@host.example.com/r.git"},
		{"https://u:a/b@c@host.example.com/x", "https://***@host.example.com/x"},
		{"https://u:/ab@host.example.com/x", "https://***@host.example.com/x"},
		{"https://u:12/ab@host.example.com/x", "https://***@host.example.com/x"},
		{"https://me@corp.example:pw/x@host.example.com/x", "https://***@host.example.com/x"},
		// An '@' in a path or query is not user information.
		{"https://github.com/o/r@v1.git", "https://github.com/o/r@v1.git"},
		{"https://github.com?ref=a@b", "https://github.com?ref=a@b"},
		{"http://localhost:8080/o/r@v1", "http://localhost:8080/o/r@v1"},
		{"https://git.example.com:8443/o/r@v1", "https://git.example.com:8443/o/r@v1"},
		{"http://gitea:3000/o/r", "http://gitea:3000/o/r"},
		// ... unless it may be a password: masking too much is the lesser harm.
		{"http://gitea:3000/o/r?ref=a@b", "http://***@b"},
		{"https://0:000#@0", "https://***@0"},
		// No scheme: left alone.
		{"git@github.com:o/r", "git@github.com:o/r"},
		{"charts/local", "charts/local"},
		{"", ""},
		// URLs in error text, however quoted.
		{`Get "http://ghp_SECRETTOKEN@127.0.0.1:45469/index.yaml": dial tcp 127.0.0.1:45469: connect: connection refused`,
			`Get "http://***@127.0.0.1:45469/index.yaml": dial tcp 127.0.0.1:45469: connect: connection refused`},
		{`parse "https://codecommit-user:AbC/dEf+gh1@git-codecommit.example.com/v1/repos/app": invalid port ":AbC" after host`,
			`parse "https://***@git-codecommit.example.com/v1/repos/app": invalid port ":AbC" after host`},
		{"from https://a:b@h.example.com/x to 'oci://t@r.example.com/c' and git@h:o/r",
			"from https://***@h.example.com/x to 'oci://***@r.example.com/c' and git@h:o/r"},
		// Quotes in a password: a quote ends a URL only when one opened it.
		{"https://user:pa'ss@charts.example.com/x", "https://***@charts.example.com/x"},
		{"git::https://user:pa'ss@charts.example.com/x", "git::https://***@charts.example.com/x"},
		{"https://user:pa`ss@charts.example.com/x", "https://***@charts.example.com/x"},
		{"https://user:pa<s>s@charts.example.com/x", "https://***@charts.example.com/x"},
		{"https://user:pa\"ss@charts.example.com/x", "https://***@charts.example.com/x"},
		{`GET "https://user:pa'ss@h.example.com/x": 404`, `GET "https://***@h.example.com/x": 404`},
		{`repo 'git::https://u:t@h.example.com/r' refused`, `repo 'git::https://***@h.example.com/r' refused`},
		{"https://host.example.com:abc/x and later user@example.com", "https://host.example.com:abc/x and later user@example.com"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzURL: whatever the input, a password placed as user information
// never survives.
func FuzzURL(f *testing.F) {
	for _, s := range []string{"s3cr3t", "AbC/dEf+gh1", "pa?ss", "pa#ss", "12/ab", "/x"} {
		f.Add("https://", "user", s, "host.example.com/x")
	}
	f.Fuzz(func(t *testing.T, scheme, user, pass, rest string) {
		// Known limits: a password holding an '@' and then a '/' reads as
		// user information, a host and a path; a user name with a dot and a
		// password starting with digits read as a host and its port (as in
		// oci://reg.example.com:5000/chart@sha256:...).
		if scheme != "https://" || len(pass) < 4 || !plain(user+pass+rest) || strings.ContainsAny(user, ":/?#@.[") ||
			strings.Contains(pass, "@") || strings.Contains(rest, "@") || strings.HasPrefix(rest, ":") {
			t.Skip()
		}
		u := scheme + user + ":" + pass + "@" + rest
		if strings.Contains(URL(u), pass) && !strings.Contains(rest, pass) {
			t.Errorf("URL(%q) = %q keeps the password", u, URL(u))
		}
	})
}

// plain says whether s holds only printable ASCII without white space,
// which ends a URL in a text.
func plain(s string) bool {
	for _, c := range s {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}
