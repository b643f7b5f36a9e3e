// Package webhook receives push notifications from git hosts and asks the
// GitRepo controller to sync the GitRepos whose repo URL and branch match.
// Only correctly signed requests change anything (see package payload),
// unless Handler.AllowUnsigned opts in to unsigned ones for providers
// without a configured key.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
)

// DefaultSecretName is the Secret, in the system namespace, with the
// webhook secret of each provider (Fleet's name).
const DefaultSecretName = "gitjob-webhook"

// MaxBodyBytes bounds a webhook body. GitHub caps its payloads at 25 MB
// (a push of many files lists them all); real pushes are mostly far
// smaller. Unsigned requests are refused before their body is read.
const MaxBodyBytes = 25 << 20

// MaxConcurrentBodies bounds the requests the receiver handles at once
// past their headers (each holds its body until it is answered), so that
// many large (or slow) requests cannot hold more than MaxConcurrentBodies ×
// MaxBodyBytes of memory; the server's read timeout frees a slot held by a
// slow sender, the handler's 30 s deadline one held by a slow API server.
const MaxConcurrentBodies = 8

// DefaultBusyWait is how long a request waits for a body slot before it is
// answered 503 (the git host may retry; polling catches up anyway).
const DefaultBusyWait = 10 * time.Second

// UnsignedLogInterval is how often, at most, the receiver logs that it
// took an unsigned webhook of one provider (Handler.AllowUnsigned).
const UnsignedLogInterval = time.Hour

// DefaultListInterval is how often, at most, requests that the shared
// secret does not verify make the receiver list the GitRepos again.
const DefaultListInterval = time.Second

// TriggerFunc asks for an immediate sync of repo because of push.
type TriggerFunc func(ctx context.Context, repo *fleet.GitRepo, push *payload.Push) error

// Handler serves webhook requests.
type Handler struct {
	// Reader lists GitRepos (the manager's cached client is fine).
	Reader client.Reader
	// SecretReader reads webhook Secrets; pass an uncached reader
	// (mgr.GetAPIReader()) so that Secrets are not cached cluster-wide.
	// Nil means Reader.
	SecretReader client.Reader
	// SystemNamespace holds the shared DefaultSecretName Secret.
	SystemNamespace string
	Trigger         TriggerFunc
	// ListInterval bounds the GitRepo LISTs of requests that the shared
	// secret does not verify (anyone can send those; some are for GitRepos
	// with their own webhookSecret): they are matched against a list at
	// most this old (default DefaultListInterval). Requests it verifies
	// list afresh.
	ListInterval time.Duration
	// AllowUnsigned takes webhooks without checking them, signed or not,
	// while the shared webhook Secret holds no key, as Rancher Fleet does
	// (deprecated there): a migration aid, off by default, since anyone
	// who can reach the receiver can then trigger polls. Once the Secret
	// holds any key, and for a GitRepo with its own webhookSecret, a valid
	// signature is needed. Such requests are
	// matched against the recent GitRepo list (ListInterval), like any
	// other unverified request.
	AllowUnsigned bool
	// BusyWait is how long a request waits for one of the
	// MaxConcurrentBodies body slots (default DefaultBusyWait).
	BusyWait time.Duration

	// bodies holds a token per body being read (MaxConcurrentBodies).
	bodiesOnce sync.Once
	bodies     chan struct{}

	// unsignedMu guards unsignedLogged, the last time an unsigned webhook
	// of each provider was logged.
	unsignedMu     sync.Mutex
	unsignedLogged map[payload.Provider]time.Time

	// listMu serializes LISTs, so that concurrent unverified requests
	// share one.
	listMu   sync.Mutex
	listed   []fleet.GitRepo
	listedAt time.Time
}

// Result is what the handler did, returned as JSON-free text to the caller.
type result struct {
	status int
	msg    string
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := ctrl.LoggerFrom(r.Context()).WithName("webhook")
	res := h.handle(ctrl.LoggerInto(r.Context(), log), r)
	if res.status >= 400 {
		log.Info("webhook refused", "status", res.status, "reason", res.msg, "remote", r.RemoteAddr)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(res.status)
	_, _ = io.WriteString(w, res.msg+"\n")
}

func (h *Handler) handle(ctx context.Context, r *http.Request) result {
	switch r.Method {
	case http.MethodPost:
	case http.MethodGet, http.MethodHead:
		// Load balancers' health checks (AWS ALB, GKE Ingress) GET the
		// webhook path and want 200, as Fleet answers. Nothing is read.
		return result{status: http.StatusOK, msg: "ok"}
	default:
		return result{status: http.StatusMethodNotAllowed, msg: "POST only (GET and HEAD answer health checks)"}
	}
	p, err := payload.Detect(r.Header)
	if err != nil {
		return result{status: http.StatusBadRequest, msg: err.Error()}
	}
	signed := payload.Signed(p, r)
	if !signed && payload.IsPing(p, r.Header) {
		// GitHub pings a webhook when it is created; a ping triggers
		// nothing, so an unsigned one is answered without any check.
		return result{status: http.StatusOK, msg: "ping received (unsigned: pushes must be signed with the configured secret)"}
	}
	// Unless unsigned requests may be taken, refuse one before reading
	// its body or calling the API server.
	if !signed && !h.AllowUnsigned {
		return refuse(payload.ErrMissingSig)
	}
	release, ok := h.acquireBody(r.Context())
	if !ok {
		return result{status: http.StatusServiceUnavailable, msg: "too many webhook requests at once; try again later"}
	}
	// The slot is held until the request is answered, since the body
	// stays in memory until then (Secret read, parsing, the GitRepo list).
	defer release()
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return result{status: http.StatusBadRequest, msg: "reading body failed"}
	}
	if len(body) > MaxBodyBytes {
		return result{status: http.StatusRequestEntityTooLarge, msg: "body too large"}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	global, err := h.secrets(ctx, h.SystemNamespace, DefaultSecretName)
	if err != nil {
		return result{status: http.StatusServiceUnavailable, msg: "reading webhook secret failed"}
	}

	push, perr := payload.Parse(p, r.Header, body)
	if perr != nil {
		// Only a correctly signed request learns whether its payload was
		// understood; everything else is refused the same way.
		if err := h.verify(ctx, p, r, body, global, sharedSecret); err != nil {
			return refuse(err)
		}
		if errors.Is(perr, payload.ErrIgnored) {
			return result{status: http.StatusOK, msg: "ignored: " + perr.Error()}
		}
		return result{status: http.StatusBadRequest, msg: perr.Error()}
	}

	// A request the shared secret verifies is authentic: it may list the
	// GitRepos afresh. Others may still be for a GitRepo with its own
	// secret, and are matched against a recent list.
	verified := payload.Verify(p, r, body, global) == nil
	repos, err := h.matching(ctx, push, verified)
	if err != nil {
		return result{status: http.StatusServiceUnavailable, msg: "listing GitRepos failed"}
	}
	if len(repos) == 0 {
		if err := h.verify(ctx, p, r, body, global, sharedSecret); err != nil {
			return refuse(err)
		}
		return result{status: http.StatusOK, msg: "no GitRepo matches"}
	}
	var verifyErr error
	triggered := 0
	for i := range repos {
		repo := &repos[i]
		secrets, source := global, sharedSecret
		if repo.Spec.WebhookSecret != "" {
			if secrets, err = h.secrets(ctx, repo.Namespace, repo.Spec.WebhookSecret); err != nil {
				return result{status: http.StatusServiceUnavailable, msg: "reading webhook secret failed"}
			}
			source = ownSecret
		}
		if err := h.verify(ctx, p, r, body, secrets, source); err != nil {
			verifyErr = err
			continue
		}
		if err := h.Trigger(ctx, repo, push); apierrors.IsNotFound(err) {
			continue // deleted since it was listed
		} else if err != nil {
			return result{status: http.StatusServiceUnavailable, msg: "triggering sync failed"}
		}
		triggered++
	}
	if triggered == 0 {
		return refuse(verifyErr)
	}
	return result{status: http.StatusOK, msg: fmt.Sprintf("triggered %d GitRepo(s)", triggered)}
}

// secretSource says where the secrets a request is checked with come from.
type secretSource int

const (
	// sharedSecret is the DefaultSecretName Secret of the system namespace.
	sharedSecret secretSource = iota
	// ownSecret is a GitRepo's spec.webhookSecret: naming one asks for
	// signed webhooks, so it never takes unsigned ones.
	ownSecret
)

// verify checks the request against secrets. With AllowUnsigned and a
// shared Secret that holds no key at all (or does not exist), as Rancher
// Fleet takes them, a request is taken unchecked (and logged, at most once
// per UnsignedLogInterval and provider). Once any provider has a key,
// nothing is taken unsigned: the provider is whatever the request's
// headers claim, so an unsigned "Gogs" push could otherwise trigger the
// GitRepos of a signed GitHub repository.
func (h *Handler) verify(ctx context.Context, p payload.Provider, r *http.Request, body []byte, secrets payload.Secrets, source secretSource) error {
	err := payload.Verify(p, r, body, secrets)
	if !errors.Is(err, payload.ErrNoSecret) || !h.AllowUnsigned || source != sharedSecret || hasKey(secrets) {
		return err
	}
	h.unsignedMu.Lock()
	now := time.Now()
	last, logged := h.unsignedLogged[p]
	due := !logged || now.Sub(last) >= UnsignedLogInterval
	if due {
		if h.unsignedLogged == nil {
			h.unsignedLogged = map[payload.Provider]time.Time{}
		}
		h.unsignedLogged[p] = now
	}
	h.unsignedMu.Unlock()
	if due {
		ctrl.LoggerFrom(ctx).Info("taking unverified webhooks: the webhook Secret holds no key and --webhook-allow-unsigned is set; add the keys to have them checked",
			"provider", string(p), "secret", h.SystemNamespace+"/"+DefaultSecretName, "remote", r.RemoteAddr, "logAgainAfter", UnsignedLogInterval.String())
	}
	return nil
}

// hasKey says whether secrets hold any non-empty key.
func hasKey(secrets payload.Secrets) bool {
	for _, v := range secrets {
		if v != "" {
			return true
		}
	}
	return false
}

func refuse(err error) result {
	if errors.Is(err, payload.ErrBadSignature) {
		return result{status: http.StatusForbidden, msg: err.Error()}
	}
	return result{status: http.StatusUnauthorized, msg: err.Error()}
}

// secrets reads a webhook Secret; a missing Secret means no secrets.
func (h *Handler) secrets(ctx context.Context, ns, name string) (payload.Secrets, error) {
	var s corev1.Secret
	reader := h.SecretReader
	if reader == nil {
		reader = h.Reader
	}
	err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return payload.Secrets{}, nil
	}
	if err != nil {
		return nil, err
	}
	return payload.SecretsFromData(s.Data), nil
}

// matching returns (copies of) the GitRepos whose repo URL and branch (or
// tag) match the push. A push without a ref matches on the URL alone.
// fresh lists the GitRepos now; otherwise a list up to ListInterval old
// is used.
func (h *Handler) matching(ctx context.Context, push *payload.Push, fresh bool) ([]fleet.GitRepo, error) {
	items, err := h.gitRepos(ctx, fresh)
	if err != nil {
		return nil, err
	}
	urls := map[string]bool{}
	for _, u := range push.RepoURLs {
		urls[payload.NormalizeURL(u)] = true
	}
	var out []fleet.GitRepo
	for i := range items {
		if !urls[payload.NormalizeURL(items[i].Spec.Repo)] || !refMatches(&items[i], push) {
			continue
		}
		// The list is shared between requests; Trigger may modify its copy.
		out = append(out, *items[i].DeepCopy())
	}
	return out, nil
}

// gitRepos lists every GitRepo, or, unless fresh, returns the last list
// when it is younger than ListInterval. The list is read-only.
func (h *Handler) gitRepos(ctx context.Context, fresh bool) ([]fleet.GitRepo, error) {
	interval := h.ListInterval
	if interval <= 0 {
		interval = DefaultListInterval
	}
	h.listMu.Lock()
	defer h.listMu.Unlock()
	if !fresh && h.listed != nil && time.Since(h.listedAt) < interval {
		return h.listed, nil
	}
	var list fleet.GitRepoList
	if err := h.Reader.List(ctx, &list); err != nil {
		return nil, err
	}
	if list.Items == nil {
		list.Items = []fleet.GitRepo{}
	}
	h.listed, h.listedAt = list.Items, time.Now()
	return list.Items, nil
}

// refMatches says whether a push moves what repo follows: its branch; for
// a revision, the tag or branch of that name (a tag wins when polling, but
// either push may move it); for HEAD, the default branch, or any branch
// when the payload does not name it (the poll then finds out). A commit
// SHA never moves.
func refMatches(repo *fleet.GitRepo, push *payload.Push) bool {
	if push.Ref == "" {
		return true
	}
	switch rev := repo.Spec.Revision; {
	case rev == "HEAD":
		b := push.Branch()
		return b != "" && (push.DefaultBranch == "" || b == push.DefaultBranch)
	case git.IsCommitSHA(rev):
		return false
	case rev != "":
		return push.Tag() == rev || push.Branch() == rev
	}
	branch := repo.Spec.Branch
	if branch == "" {
		branch = git.DefaultBranch
	}
	return push.Branch() == branch
}

// acquireBody takes one of the MaxConcurrentBodies body slots, waiting at
// most BusyWait; ok is false when none freed up in time.
func (h *Handler) acquireBody(ctx context.Context) (release func(), ok bool) {
	h.bodiesOnce.Do(func() { h.bodies = make(chan struct{}, MaxConcurrentBodies) })
	wait := h.BusyWait
	if wait <= 0 {
		wait = DefaultBusyWait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case h.bodies <- struct{}{}:
		return func() { <-h.bodies }, true
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, false
}
