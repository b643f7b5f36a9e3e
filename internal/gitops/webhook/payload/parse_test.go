package payload_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
	"github.com/fleetgo/fleet/internal/gitops/webhook/webhooktest"
)

const commit = "0123456789abcdef0123456789abcdef01234567"

func request(h http.Header, body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header = h
	return r
}

func TestRecordedPayloads(t *testing.T) {
	const repoURL = "https://git.example.com/example/fleet-apps.git"
	for _, p := range webhooktest.Providers {
		t.Run(string(p), func(t *testing.T) {
			h, body := webhooktest.Push(p, repoURL, commit)
			got, err := payload.Detect(h)
			if err != nil || got != p {
				t.Fatalf("Detect = %q, %v", got, err)
			}
			push, err := payload.Parse(p, h, body)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if push.Commit != commit || push.Branch() != "main" {
				t.Fatalf("push = %+v", push)
			}
			if !slices.Contains(push.RepoURLs, repoURL) {
				t.Fatalf("repo URLs %v miss %s", push.RepoURLs, repoURL)
			}

			secrets := payload.SecretsFromData(webhooktest.SecretData("right"))
			// Unsigned: refused. (Bitbucket Cloud's webhook UUID counts
			// as its credential when there is no signature.)
			unsigned := h.Clone()
			unsigned.Del("X-Hook-UUID")
			if err := payload.Verify(p, request(unsigned, body), body, secrets); !errors.Is(err, payload.ErrMissingSig) {
				t.Fatalf("unsigned: %v", err)
			}
			// Signed with the wrong secret: refused.
			wrong := h.Clone()
			webhooktest.Sign(p, wrong, body, "wrong")
			if err := payload.Verify(p, request(wrong, body), body, secrets); !errors.Is(err, payload.ErrBadSignature) {
				t.Fatalf("wrong secret: %v", err)
			}
			// Signed right: accepted; a changed body is then refused.
			signed := h.Clone()
			webhooktest.Sign(p, signed, body, "right")
			if err := payload.Verify(p, request(signed, body), body, secrets); err != nil {
				t.Fatalf("signed: %v", err)
			}
			if p != payload.GitLab && p != payload.AzureDevOps {
				tampered := append(bytes.Clone(body), ' ')
				if err := payload.Verify(p, request(signed, tampered), tampered, secrets); !errors.Is(err, payload.ErrBadSignature) {
					t.Fatalf("tampered body: %v", err)
				}
			}
			// No secret configured: refused.
			if err := payload.Verify(p, request(signed, body), body, payload.Secrets{}); !errors.Is(err, payload.ErrNoSecret) {
				t.Fatalf("no secret: %v", err)
			}
		})
	}
}

// TestAzureDevOpsNeedsPassword: a username is no secret (it is in the
// service hook's URL settings and often the organisation's name), so a
// Secret that gives only azure-username verifies nothing: a request with
// that username and an empty password must be refused.
func TestAzureDevOpsNeedsPassword(t *testing.T) {
	h, body := webhooktest.Push(payload.AzureDevOps, "https://dev.azure.com/org/proj/_git/repo", commit)
	r := request(h.Clone(), body)
	r.SetBasicAuth("fleet", "")
	secrets := payload.SecretsFromData(map[string][]byte{payload.KeyAzureUsername: []byte("fleet")})
	if err := payload.Verify(payload.AzureDevOps, r, body, secrets); !errors.Is(err, payload.ErrNoSecret) {
		t.Fatalf("username-only secret, empty password: %v, want ErrNoSecret", err)
	}
}

func TestNonPushIgnored(t *testing.T) {
	h := http.Header{}
	h.Set("X-GitHub-Event", "ping")
	if _, err := payload.Parse(payload.GitHub, h, []byte(`{"zen":"hi"}`)); !errors.Is(err, payload.ErrIgnored) {
		t.Fatalf("ping: %v", err)
	}
	h.Set("X-GitHub-Event", "push")
	if _, err := payload.Parse(payload.GitHub, h, []byte(`{not json`)); !errors.Is(err, payload.ErrBadPayload) {
		t.Fatalf("bad json: %v", err)
	}
	if _, err := payload.Detect(http.Header{}); !errors.Is(err, payload.ErrUnknownProvider) {
		t.Fatalf("no headers: %v", err)
	}
}

func TestNormalizeURL(t *testing.T) {
	same := [][]string{
		{"https://github.com/Org/Repo.git", "git@github.com:org/repo.git", "ssh://git@github.com/org/repo", "https://user:tok@github.com/org/repo/", "git://github.com/org/repo.git", "https://github.com:443/org/repo"},
		{"https://bitbucket.example.com/scm/ex/fleet-apps.git", "ssh://git@bitbucket.example.com:7999/ex/fleet-apps.git"},
		{"https://org@dev.azure.com/org/proj/_git/repo", "git@ssh.dev.azure.com:v3/org/proj/repo"},
		{"http://127.0.0.1:36789/app.git", "ssh://git@127.0.0.1:2222/app.git"},
	}
	for _, group := range same {
		want := payload.NormalizeURL(group[0])
		for _, u := range group[1:] {
			if got := payload.NormalizeURL(u); got != want {
				t.Errorf("NormalizeURL(%q) = %q, want %q (from %q)", u, got, want, group[0])
			}
		}
	}
	if payload.NormalizeURL("https://github.com/org/repo") == payload.NormalizeURL("https://github.com/org/other") {
		t.Error("different repos normalized equal")
	}
	if payload.NormalizeURL("https://github.com/org/repo") == payload.NormalizeURL("https://gitlab.com/org/repo") {
		t.Error("different hosts normalized equal")
	}
}

// FuzzParse feeds arbitrary headers and bodies to detection, parsing,
// verification and URL normalization: none may panic.
func FuzzParse(f *testing.F) {
	for i, p := range webhooktest.Providers {
		h, body := webhooktest.Push(p, "https://git.example.com/a/b.git", commit)
		f.Add(uint8(i), string(body), h.Get("X-Hub-Signature"))
	}
	f.Add(uint8(3), `{"changes":[{}],"repository":{"links":{"clone":[1,{"href":2},{"href":"x"}]}}}`, "sha256")
	f.Fuzz(func(t *testing.T, which uint8, body, sig string) {
		p := webhooktest.Providers[int(which)%len(webhooktest.Providers)]
		h, _ := webhooktest.Push(p, "x", "y")
		h.Set("X-Hub-Signature", sig)
		h.Set("X-Hub-Signature-256", sig)
		h.Set("X-Gitea-Signature", sig)
		h.Set("X-Gogs-Signature", sig)
		h.Set("X-Gitlab-Token", sig)
		h.Set("Authorization", sig)
		if _, err := payload.Detect(h); err != nil {
			t.Fatal(err)
		}
		push, err := payload.Parse(p, h, []byte(body))
		if err == nil {
			for _, u := range push.RepoURLs {
				_ = payload.NormalizeURL(u)
			}
			_, _ = push.Branch(), push.Tag()
		}
		secrets := payload.SecretsFromData(webhooktest.SecretData("s"))
		if err := payload.Verify(p, request(h, []byte(body)), []byte(body), secrets); err == nil && sig != "s" {
			// Only a correct HMAC can pass; a random string almost never is.
			k, v := payload.Sign(p, "s", []byte(body))
			if h.Get(k) != v {
				t.Fatalf("accepted bad signature %q for %s", sig, p)
			}
		}
		_ = payload.NormalizeURL(body)
	})
}

// TestCommitMustBeObjectName: the commit a push names is written into the
// GitRepo, so every provider's parser takes only a git object name (7 to 64
// hex digits) and refuses anything else as a bad payload.
func TestCommitMustBeObjectName(t *testing.T) {
	for _, p := range webhooktest.Providers {
		for _, c := range []string{"0123456789abcdef0123456789abcdef01234567", "abc1234", strings.Repeat("a", 64)} {
			h, body := webhooktest.Push(p, "https://git.example.com/example/fleet-apps.git", c)
			if push, err := payload.Parse(p, h, body); err != nil || push.Commit != c {
				t.Errorf("%s: commit %q: %v", p, c, err)
			}
		}
		for _, c := range []string{"main", "abc12", strings.Repeat("a", 65), "0123456789abcdef0123456789abcdef0123456z", strings.Repeat("f", 100000)} {
			h, body := webhooktest.Push(p, "https://git.example.com/example/fleet-apps.git", c)
			_, err := payload.Parse(p, h, body)
			if !errors.Is(err, payload.ErrBadPayload) {
				t.Errorf("%s: commit of %d characters %.12q: %v, want a bad payload", p, len(c), c, err)
			} else if strings.Contains(err.Error(), c) {
				t.Errorf("%s: the error quotes the commit: %v", p, err)
			}
		}
	}
}
