// Package webhooktest holds recorded push payloads of every supported git
// host (written for this project in each provider's documented shape) and
// builds signed requests from them, for tests of the webhook receiver.
package webhooktest

import (
	"embed"
	"net/http"
	"strings"

	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
)

//go:embed payloads/*.json
var payloads embed.FS

// Providers lists every provider with a recorded push payload.
var Providers = []payload.Provider{
	payload.GitHub, payload.GitLab, payload.Bitbucket, payload.BitbucketServer,
	payload.Gitea, payload.Gogs, payload.AzureDevOps,
}

// BitbucketHookUUID is the X-Hook-UUID of the recorded Bitbucket Cloud
// push: the webhook's UUID, which Fleet's `bitbucket` key may hold instead
// of an HMAC secret.
const BitbucketHookUUID = "cfd1a1b0-0000-0000-0000-000000000000"

// Push returns the headers and body of a push of commit to branch "main"
// of repoURL, as provider p sends it, unsigned.
func Push(p payload.Provider, repoURL, commit string) (http.Header, []byte) {
	raw, err := payloads.ReadFile("payloads/" + fileOf(p) + "-push.json")
	if err != nil {
		panic(err)
	}
	body := strings.NewReplacer("{{REPO}}", repoURL, "{{COMMIT}}", commit).Replace(string(raw))
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	switch p {
	case payload.GitHub:
		h.Set("X-GitHub-Event", "push")
		h.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	case payload.GitLab:
		h.Set("X-Gitlab-Event", "Push Hook")
	case payload.Bitbucket:
		h.Set("X-Event-Key", "repo:push")
		h.Set("X-Hook-UUID", BitbucketHookUUID)
		h.Set("User-Agent", "Bitbucket-Webhooks/2.0")
	case payload.BitbucketServer:
		h.Set("X-Event-Key", "repo:refs_changed")
		h.Set("X-Request-Id", "b7a3c2d1-0000-0000-0000-000000000000")
	case payload.Gitea:
		h.Set("X-Gitea-Event", "push")
		h.Set("X-Gogs-Event", "push")
		h.Set("X-GitHub-Event", "push")
	case payload.Gogs:
		h.Set("X-Gogs-Event", "push")
	case payload.AzureDevOps:
		h.Set("X-Vss-Activityid", "9b6c2d4e-0000-0000-0000-000000000000")
	}
	return h, []byte(body)
}

// Sign adds the signature (or token, or basic auth for Azure DevOps) that
// p sends when configured with secret.
func Sign(p payload.Provider, h http.Header, body []byte, secret string) {
	if p == payload.AzureDevOps {
		r := &http.Request{Header: h}
		r.SetBasicAuth("fleet", secret)
		return
	}
	k, v := payload.Sign(p, secret, body)
	h.Set(k, v)
}

// SecretData is the webhook Secret data that makes secret valid for every
// provider (Azure DevOps: user "fleet", password secret).
func SecretData(secret string) map[string][]byte {
	d := map[string][]byte{
		payload.KeyAzureUsername: []byte("fleet"),
		payload.KeyAzurePassword: []byte(secret),
	}
	for _, p := range Providers {
		if p != payload.AzureDevOps {
			d[string(p)] = []byte(secret)
		}
	}
	return d
}

func fileOf(p payload.Provider) string {
	if p == payload.AzureDevOps {
		return "azure"
	}
	return string(p)
}
