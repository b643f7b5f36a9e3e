// Package payload understands the push webhooks of git hosts (GitHub,
// GitLab, Bitbucket cloud and server, Gitea, Gogs, Azure DevOps): it tells
// the provider from the headers, checks its signature or token in constant
// time, decodes push payloads into the types of
// github.com/go-playground/webhooks/v6 and normalizes repository URLs. It has
// no Kubernetes dependencies, so that it is cheap to fuzz.
package payload

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // GitHub's legacy X-Hub-Signature is HMAC-SHA1.
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"regexp"
	"strings"

	"github.com/go-playground/webhooks/v6/azuredevops"
	"github.com/go-playground/webhooks/v6/bitbucket"
	bitbucketserver "github.com/go-playground/webhooks/v6/bitbucket-server"
	"github.com/go-playground/webhooks/v6/gitea"
	"github.com/go-playground/webhooks/v6/github"
	"github.com/go-playground/webhooks/v6/gitlab"
)

// Provider names a git host kind. The values are also the keys of the
// webhook Secret (as in Fleet's `gitjob-webhook`).
type Provider string

const (
	GitHub          Provider = "github"
	GitLab          Provider = "gitlab"
	Bitbucket       Provider = "bitbucket"
	BitbucketServer Provider = "bitbucket-server"
	Gitea           Provider = "gitea"
	Gogs            Provider = "gogs"
	AzureDevOps     Provider = "azure"
)

// Secret keys for Azure DevOps, which uses basic auth instead of a shared
// secret.
const (
	KeyAzureUsername = "azure-username"
	KeyAzurePassword = "azure-password"
)

// Push is what a push event tells: which repo, which ref, which commit.
type Push struct {
	Provider Provider
	// RepoURLs are every URL form the payload gives for the repository.
	RepoURLs []string
	// Ref is the full ref name (refs/heads/x or refs/tags/y); may be empty.
	Ref    string
	Commit string
	// DefaultBranch is the repository's default branch when the payload
	// names it (GitHub, GitLab, Gitea, Gogs), for GitRepos following HEAD.
	DefaultBranch string
}

// Branch returns the branch name when Ref is a branch.
func (p *Push) Branch() string {
	return strings.TrimPrefix(refWith(p.Ref, "refs/heads/"), "refs/heads/")
}

// Tag returns the tag name when Ref is a tag.
func (p *Push) Tag() string { return strings.TrimPrefix(refWith(p.Ref, "refs/tags/"), "refs/tags/") }

func refWith(ref, prefix string) string {
	if strings.HasPrefix(ref, prefix) {
		return ref
	}
	return ""
}

// Errors a request can be refused with.
var (
	ErrUnknownProvider = errors.New("unknown webhook provider")
	ErrIgnored         = errors.New("event is not a push")
	ErrNoSecret        = errors.New("no webhook secret configured for provider")
	ErrMissingSig      = errors.New("request is not signed")
	ErrBadSignature    = errors.New("webhook signature does not match")
	ErrBadPayload      = errors.New("malformed webhook payload")
)

// Detect tells the provider from the request headers. Gitea also sends
// Gogs and GitHub headers, so it is checked first.
func Detect(h http.Header) (Provider, error) {
	switch {
	case h.Get("X-Gitea-Event") != "":
		return Gitea, nil
	case h.Get("X-Gogs-Event") != "":
		return Gogs, nil
	case h.Get("X-GitHub-Event") != "":
		return GitHub, nil
	case h.Get("X-Gitlab-Event") != "":
		return GitLab, nil
	case h.Get("X-Event-Key") != "":
		if h.Get("X-Hook-UUID") != "" || strings.HasPrefix(h.Get("User-Agent"), "Bitbucket-Webhooks") {
			return Bitbucket, nil
		}
		return BitbucketServer, nil
	case h.Get("X-Vss-Activityid") != "" || h.Get("X-Vss-Subscriptionid") != "":
		return AzureDevOps, nil
	}
	return "", ErrUnknownProvider
}

// Secrets holds one shared secret per provider (Azure: user and password).
type Secrets map[string]string

// SecretsFromData reads a Secret's data.
func SecretsFromData(data map[string][]byte) Secrets {
	s := Secrets{}
	for k, v := range data {
		s[k] = string(v)
	}
	return s
}

// Verify checks the request's signature or token for p. A provider without
// a configured secret is refused with ErrNoSecret: unsigned webhooks are
// not accepted (a receiver may choose to take those, see
// webhook.Handler.AllowUnsigned).
func Verify(p Provider, r *http.Request, body []byte, secrets Secrets) error {
	switch p {
	case GitHub:
		if sig := r.Header.Get("X-Hub-Signature-256"); sig != "" {
			return checkHMAC(secrets[string(GitHub)], sig, "sha256=", sha256.New, body)
		}
		return checkHMAC(secrets[string(GitHub)], r.Header.Get("X-Hub-Signature"), "sha1=", sha1.New, body)
	case GitLab:
		secret := secrets[string(GitLab)]
		if secret == "" {
			return ErrNoSecret
		}
		token := r.Header.Get("X-Gitlab-Token")
		if token == "" {
			return ErrMissingSig
		}
		if subtle.ConstantTimeCompare([]byte(token), []byte(secret)) != 1 {
			return ErrBadSignature
		}
		return nil
	case Bitbucket:
		// A Bitbucket Cloud webhook with a secret signs its body
		// (X-Hub-Signature). Older ones, which Fleet's `bitbucket` key is
		// for, cannot: Fleet compares the key with the webhook's UUID
		// (X-Hook-UUID), shown only to the repository's admins, and
		// ignores any signature. So a signature that the key does not
		// verify still passes when the UUID is the key: a Fleet setup
		// whose key is the UUID keeps working after a secret is added to
		// the webhook on Bitbucket's side.
		uuidOK := bitbucketUUIDMatches(r, secrets)
		if sig := r.Header.Get("X-Hub-Signature"); sig != "" {
			err := checkHMAC(secrets[string(Bitbucket)], sig, "sha256=", sha256.New, body)
			if err != nil && uuidOK {
				return nil
			}
			return err
		}
		if strings.TrimSpace(secrets[string(Bitbucket)]) == "" {
			return ErrNoSecret
		}
		if r.Header.Get("X-Hook-UUID") == "" {
			return ErrMissingSig
		}
		if !uuidOK {
			// Unsigned, and not the configured webhook.
			return fmt.Errorf("%w: X-Hook-UUID is not the configured webhook's", ErrMissingSig)
		}
		return nil
	case BitbucketServer:
		return checkHMAC(secrets[string(p)], r.Header.Get("X-Hub-Signature"), "sha256=", sha256.New, body)
	case Gitea:
		secret := secrets[string(Gitea)]
		if secret == "" {
			secret = secrets[string(Gogs)]
		}
		return checkHMAC(secret, r.Header.Get("X-Gitea-Signature"), "", sha256.New, body)
	case Gogs:
		return checkHMAC(secrets[string(Gogs)], r.Header.Get("X-Gogs-Signature"), "", sha256.New, body)
	case AzureDevOps:
		user, pass := secrets[KeyAzureUsername], secrets[KeyAzurePassword]
		// The password is the secret: a username alone (often the
		// organisation's name) would let anyone trigger polls.
		if pass == "" {
			return ErrNoSecret
		}
		u, pw, ok := r.BasicAuth()
		if !ok {
			return ErrMissingSig
		}
		uok := subtle.ConstantTimeCompare([]byte(u), []byte(user))
		pok := subtle.ConstantTimeCompare([]byte(pw), []byte(pass))
		if uok&pok != 1 {
			return ErrBadSignature
		}
		return nil
	}
	return ErrUnknownProvider
}

// bitbucketUUIDMatches reports, in constant time, whether the request's
// X-Hook-UUID is the configured `bitbucket` key (Fleet's meaning of that
// key). An empty key or header never matches.
func bitbucketUUIDMatches(r *http.Request, secrets Secrets) bool {
	uuid := strings.TrimSpace(secrets[string(Bitbucket)])
	got := r.Header.Get("X-Hook-UUID")
	if uuid == "" || got == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(uuid)) == 1
}

// IsPing reports whether the request is a provider's ping (GitHub's
// `ping` event, sent when a webhook is created or tested). A ping names
// no push, so a receiver can answer it without checking anything.
func IsPing(p Provider, h http.Header) bool {
	return p == GitHub && h.Get("X-GitHub-Event") == "ping"
}

// Signed reports whether the request carries what Verify checks for p: a
// signature, token, webhook UUID or basic auth. A receiver refuses requests
// without one before it does any work for them.
func Signed(p Provider, r *http.Request) bool {
	h := r.Header
	switch p {
	case GitHub:
		return h.Get("X-Hub-Signature-256") != "" || h.Get("X-Hub-Signature") != ""
	case GitLab:
		return h.Get("X-Gitlab-Token") != ""
	case Bitbucket:
		return h.Get("X-Hub-Signature") != "" || h.Get("X-Hook-UUID") != ""
	case BitbucketServer:
		return h.Get("X-Hub-Signature") != ""
	case Gitea:
		return h.Get("X-Gitea-Signature") != ""
	case Gogs:
		return h.Get("X-Gogs-Signature") != ""
	case AzureDevOps:
		_, _, ok := r.BasicAuth()
		return ok
	}
	return false
}

func checkHMAC(secret, sig, prefix string, h func() hash.Hash, body []byte) error {
	if secret == "" {
		return ErrNoSecret
	}
	if sig == "" {
		return ErrMissingSig
	}
	if !strings.HasPrefix(sig, prefix) {
		return ErrBadSignature
	}
	got, err := hex.DecodeString(sig[len(prefix):])
	if err != nil {
		return ErrBadSignature
	}
	mac := hmac.New(h, []byte(secret))
	_, _ = mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrBadSignature
	}
	return nil
}

// Sign returns the signature header value a provider would send for body.
// Tests and tooling use it; it is the inverse of Verify.
func Sign(p Provider, secret string, body []byte) (header, value string) {
	mac := hmac.New(sha256.New, []byte(secret))
	_, _ = mac.Write(body)
	sum := hex.EncodeToString(mac.Sum(nil))
	switch p {
	case GitHub:
		return "X-Hub-Signature-256", "sha256=" + sum
	case Bitbucket, BitbucketServer:
		return "X-Hub-Signature", "sha256=" + sum
	case Gitea:
		return "X-Gitea-Signature", sum
	case Gogs:
		return "X-Gogs-Signature", sum
	case GitLab:
		return "X-Gitlab-Token", secret
	}
	return "", ""
}

// Parse decodes a push event. Other events return ErrIgnored; bodies that
// do not decode return ErrBadPayload. It never panics on any input.
func Parse(p Provider, h http.Header, body []byte) (*Push, error) {
	push := &Push{Provider: p}
	switch p {
	case GitHub:
		if ev := h.Get("X-GitHub-Event"); ev != string(github.PushEvent) {
			return nil, fmt.Errorf("%w: %q", ErrIgnored, ev)
		}
		var pl github.PushPayload
		if err := decode(body, &pl); err != nil {
			return nil, err
		}
		push.Ref, push.Commit, push.DefaultBranch = pl.Ref, pl.After, pl.Repository.DefaultBranch
		push.RepoURLs = nonEmpty(pl.Repository.CloneURL, pl.Repository.SSHURL, pl.Repository.HTMLURL, pl.Repository.GitURL)
	case GitLab:
		ev := h.Get("X-Gitlab-Event")
		if ev != string(gitlab.PushEvents) && ev != string(gitlab.TagEvents) {
			return nil, fmt.Errorf("%w: %q", ErrIgnored, ev)
		}
		var pl gitlab.PushEventPayload
		if err := decode(body, &pl); err != nil {
			return nil, err
		}
		push.Ref, push.Commit, push.DefaultBranch = pl.Ref, pl.CheckoutSHA, pl.Project.DefaultBranch
		if push.Commit == "" {
			push.Commit = pl.After
		}
		push.RepoURLs = nonEmpty(pl.Project.GitHTTPURL, pl.Project.GitSSHURL, pl.Project.WebURL,
			pl.Repository.GitHTTPURL, pl.Repository.GitSSHURL, pl.Repository.URL, pl.Repository.Homepage)
	case Bitbucket:
		if ev := h.Get("X-Event-Key"); ev != string(bitbucket.RepoPushEvent) {
			return nil, fmt.Errorf("%w: %q", ErrIgnored, ev)
		}
		var pl bitbucket.RepoPushPayload
		if err := decode(body, &pl); err != nil {
			return nil, err
		}
		for _, c := range pl.Push.Changes {
			if c.New.Name == "" {
				continue
			}
			prefix := "refs/heads/"
			if c.New.Type == "tag" {
				prefix = "refs/tags/"
			}
			push.Ref, push.Commit = prefix+c.New.Name, c.New.Target.Hash
			break
		}
		push.RepoURLs = nonEmpty(pl.Repository.Links.HTML.Href)
		if pl.Repository.FullName != "" {
			push.RepoURLs = append(push.RepoURLs, "https://bitbucket.org/"+pl.Repository.FullName)
		}
	case BitbucketServer:
		if ev := h.Get("X-Event-Key"); ev != string(bitbucketserver.RepositoryReferenceChangedEvent) {
			return nil, fmt.Errorf("%w: %q", ErrIgnored, ev)
		}
		var pl bitbucketserver.RepositoryReferenceChangedPayload
		if err := decode(body, &pl); err != nil {
			return nil, err
		}
		if len(pl.Changes) > 0 {
			push.Ref, push.Commit = pl.Changes[0].ReferenceID, pl.Changes[0].ToHash
		}
		push.RepoURLs = linkHrefs(pl.Repository.Links)
	case Gitea, Gogs:
		ev := h.Get("X-Gitea-Event")
		if p == Gogs {
			ev = h.Get("X-Gogs-Event")
		}
		if ev != string(gitea.PushEvent) {
			return nil, fmt.Errorf("%w: %q", ErrIgnored, ev)
		}
		// Gogs' push payload has the same shape as Gitea's.
		var pl gitea.PushPayload
		if err := decode(body, &pl); err != nil {
			return nil, err
		}
		push.Ref, push.Commit = pl.Ref, pl.After
		if pl.Repo != nil {
			push.RepoURLs = nonEmpty(pl.Repo.CloneURL, pl.Repo.SSHURL, pl.Repo.HTMLURL)
			push.DefaultBranch = pl.Repo.DefaultBranch
		}
	case AzureDevOps:
		var pl azuredevops.GitPushEvent
		if err := decode(body, &pl); err != nil {
			return nil, err
		}
		if pl.EventType != string(azuredevops.GitPushEventType) {
			return nil, fmt.Errorf("%w: %q", ErrIgnored, pl.EventType)
		}
		if len(pl.Resource.RefUpdates) > 0 {
			push.Ref, push.Commit = pl.Resource.RefUpdates[0].Name, pl.Resource.RefUpdates[0].NewObjectID
		}
		push.RepoURLs = nonEmpty(pl.Resource.Repository.RemoteURL)
	default:
		return nil, ErrUnknownProvider
	}
	if len(push.RepoURLs) == 0 {
		return nil, fmt.Errorf("%w: no repository URL", ErrBadPayload)
	}
	// The commit ends up in the GitRepo (annotation, status.webhookCommit):
	// only a git object name is taken, never whatever a sender wrote.
	if push.Commit != "" && !commitRE.MatchString(push.Commit) {
		return nil, fmt.Errorf("%w: the commit is not a git object name (7 to 64 hex digits)", ErrBadPayload)
	}
	return push, nil
}

// commitRE is a git object name: SHA-1 or SHA-256, full or abbreviated.
var commitRE = regexp.MustCompile(`^[0-9a-fA-F]{7,64}$`)

func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	return nil
}

func nonEmpty(s ...string) []string {
	var out []string
	for _, v := range s {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// linkHrefs collects clone and self hrefs from Bitbucket Server's links map
// ({"clone":[{"href":..,"name":"http"}],"self":[{"href":..}]}).
func linkHrefs(links map[string]interface{}) []string {
	var out []string
	for _, key := range []string{"clone", "self"} {
		list, _ := links[key].([]interface{})
		for _, item := range list {
			m, _ := item.(map[string]interface{})
			if href, _ := m["href"].(string); href != "" {
				out = append(out, href)
			}
		}
	}
	return out
}
