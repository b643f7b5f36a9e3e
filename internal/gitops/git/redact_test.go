package git

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

func TestDescribeRedactsURLCredentials(t *testing.T) {
	inner := fmt.Errorf("Get \"https://bob:hunter2@git.example.com/x.git/info/refs\": %w", transport.ErrAuthorizationFailed)
	err := describe(context.Background(), inner)
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "https://***@git.example.com/x.git") {
		t.Fatalf("not redacted: %v", err)
	}
	if !errors.Is(err, transport.ErrAuthorizationFailed) || !strings.HasPrefix(err.Error(), "authorization failed") {
		t.Fatalf("lost the cause: %v", err)
	}
	if got := redact("https://bob:pw@h/x"); got != "https://***@h/x" {
		t.Fatalf("redact = %q", got)
	}
}

// TestRedact: any userinfo of a URL with a scheme is masked, a token given
// as the user name alone included; scp-like SSH addresses (user@host:path)
// carry no secret (SSH authenticates with a key) and are left as they are,
// like the messages redactedError masks.
func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://bob:hunter2@github.com/o/r.git", "https://***@github.com/o/r.git"},
		{"https://ghp_secret@github.com/o/r.git", "https://***@github.com/o/r.git"},
		{"https://x-access-token:ghs_abc@github.com/o/r", "https://***@github.com/o/r"},
		{"https://bob:p@ss@github.com/o/r.git", "https://***@github.com/o/r.git"},
		{"http://ghp_secret@127.0.0.1:8080", "http://***@127.0.0.1:8080"},
		{"ssh://git@github.com/o/r.git", "ssh://***@github.com/o/r.git"},
		{"https://github.com/o/r.git", "https://github.com/o/r.git"},
		{"https://github.com/o/r@v1.git", "https://github.com/o/r@v1.git"},
		{"https://github.com?ref=a@b", "https://github.com?ref=a@b"},
		{"git@github.com:o/r", "git@github.com:o/r"},
		{"", ""},
	} {
		if got := redact(tc.in); got != tc.want {
			t.Errorf("redact(%q) = %q; want %q", tc.in, got, tc.want)
		}
		// redactedError masks the same URLs in the same way.
		if got := (&redactedError{err: errors.New("at " + tc.in + ": x")}).Error(); got != "at "+tc.want+": x" {
			t.Errorf("redactedError(%q) = %q; want %q", tc.in, got, "at "+tc.want+": x")
		}
	}
}

// TestUnparsableSSHURLIsRedacted: the URL parser's message quotes the URL;
// its password is masked.
func TestUnparsableSSHURLIsRedacted(t *testing.T) {
	r := Remote{URL: "ssh://git:hunter2@host:badport/x.git", Credentials: Credentials{SSHKey: []byte("k"), KnownHosts: []byte("h")}}
	_, err := authFor(context.Background(), r)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("authFor = %v", err)
	}
}
