package bundlereader

import (
	"strings"
	"testing"
)

// TestSSHServer: the server a host key error names is host:port as a
// known_hosts line lists it (an IPv6 literal in brackets, once), the one
// git.HostPort scopes the key to; a URL that names no server is shown
// redacted, never with its password.
func TestSSHServer(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{in: "git@github.com:org/repo.git", want: "github.com:22"},
		{in: "git@git.example:2222:org/repo.git", want: "git.example:2222"},
		{in: "ssh://git@git.example:2222/org/repo.git", want: "git.example:2222"},
		{in: "ssh://git@[2001:db8::1]/org/repo.git", want: "[2001:db8::1]:22"},
		{in: "ssh://git@[2001:db8::1]:2222/org/repo.git", want: "[2001:db8::1]:2222"},
	} {
		if got := sshServer(tc.in); got != tc.want {
			t.Errorf("sshServer(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := sshServer("ssh://alice:s3cret@%zz/org/repo"); strings.Contains(got, "s3cret") {
		t.Errorf("sshServer of a bad URL shows its password: %q", got)
	}
}
