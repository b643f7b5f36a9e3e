package payload_test

import (
	"errors"
	"testing"

	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
	"github.com/fleetgo/fleet/internal/gitops/webhook/webhooktest"
)

// TestSigned: Signed, which lets the receiver refuse a request before any
// API call, agrees with Verify: a request it calls unsigned is one Verify
// refuses as unsigned, and a signed one is one Verify can accept.
func TestSigned(t *testing.T) {
	secrets := payload.SecretsFromData(webhooktest.SecretData("right"))
	for _, p := range webhooktest.Providers {
		h, body := webhooktest.Push(p, "https://git.example.com/example/fleet-apps.git", commit)
		unsigned := h.Clone()
		unsigned.Del("X-Hook-UUID")
		if payload.Signed(p, request(unsigned, body)) {
			t.Errorf("%s: unsigned request counted as signed", p)
		}
		if err := payload.Verify(p, request(unsigned, body), body, secrets); !errors.Is(err, payload.ErrMissingSig) {
			t.Errorf("%s: Verify of an unsigned request: %v", p, err)
		}
		signed := h.Clone()
		webhooktest.Sign(p, signed, body, "right")
		if !payload.Signed(p, request(signed, body)) {
			t.Errorf("%s: signed request counted as unsigned", p)
		}
		if err := payload.Verify(p, request(signed, body), body, secrets); err != nil {
			t.Errorf("%s: Verify of a signed request: %v", p, err)
		}
	}
}

// TestDefaultBranch: the payloads that name the repository's default
// branch pass it on, so that a GitRepo following HEAD is woken by pushes
// to that branch only.
func TestDefaultBranch(t *testing.T) {
	for _, p := range webhooktest.Providers {
		h, body := webhooktest.Push(p, "https://git.example.com/example/fleet-apps.git", commit)
		push, err := payload.Parse(p, h, body)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		want := ""
		switch p {
		case payload.GitHub, payload.GitLab, payload.Gitea, payload.Gogs:
			want = "main"
		}
		if push.DefaultBranch != want {
			t.Errorf("%s: default branch %q, want %q", p, push.DefaultBranch, want)
		}
	}
}

// TestIsPing: only GitHub's ping event is a ping; Gitea, which also sends
// X-GitHub-Event, is not taken for GitHub.
func TestIsPing(t *testing.T) {
	h, _ := webhooktest.Push(payload.GitHub, "https://git.example.com/example/fleet-apps.git", commit)
	h.Set("X-GitHub-Event", "ping")
	if !payload.IsPing(payload.GitHub, h) {
		t.Error("GitHub ping not recognized")
	}
	if payload.IsPing(payload.Gitea, h) {
		t.Error("a Gitea request counted as a GitHub ping")
	}
	h.Set("X-GitHub-Event", "push")
	if payload.IsPing(payload.GitHub, h) {
		t.Error("a GitHub push counted as a ping")
	}
}
