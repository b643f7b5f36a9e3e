package webhook_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
	"github.com/fleetgo/fleet/internal/gitops/poll"
	"github.com/fleetgo/fleet/internal/gitops/webhook"
	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
	"github.com/fleetgo/fleet/internal/gitops/webhook/webhooktest"
)

// These tests run the receiver with the GitRepo controller's real trigger,
// so that what they check is what a user sees: the webhook-commit
// annotation the receiver writes on the GitRepo (which the controller
// copies into status.webhookCommit), read back from the API server.

// markingHandler is a receiver whose trigger marks GitRepos as the
// controller's does.
func markingHandler(t *testing.T, systemNS string, allowUnsigned bool) (*webhook.Handler, *gitRepoLists) {
	t.Helper()
	reader, lists := countingReader(t)
	rec := &gitops.Reconciler{Client: env.Client, Opts: gitops.Options{Tracker: poll.NewTracker()}}
	return &webhook.Handler{
		Reader:          reader,
		SystemNamespace: systemNS,
		Trigger:         rec.TriggerWebhook,
		ListInterval:    time.Hour,
		AllowUnsigned:   allowUnsigned,
	}, lists
}

// mark is the commit the receiver last marked the GitRepo with.
func mark(t *testing.T, ns, name string) string {
	t.Helper()
	var gr fleet.GitRepo
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &gr); err != nil {
		t.Fatal(err)
	}
	return gr.Annotations[gitops.WebhookCommitAnnotation]
}

// logLines collects the log lines of requests sent through it.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// send serves one request and returns its status and body.
func send(h http.Handler, method string, hdr http.Header, body []byte, logs *logLines) (int, string) {
	r := httptest.NewRequest(method, "/", bytes.NewReader(body))
	if hdr != nil {
		r.Header = hdr
	}
	if logs != nil {
		log := funcr.New(func(prefix, args string) {
			logs.mu.Lock()
			defer logs.mu.Unlock()
			logs.lines = append(logs.lines, prefix+" "+args)
		}, funcr.Options{})
		r = r.WithContext(ctrl.LoggerInto(r.Context(), log))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

const (
	commit2 = "1123456789abcdef0123456789abcdef01234567"
	commit3 = "2123456789abcdef0123456789abcdef01234567"
)

// TestAllowUnsigned: unsigned webhooks are refused by default. With
// AllowUnsigned (--webhook-allow-unsigned) and a shared Secret without any
// key, as Rancher Fleet takes them, a push marks its GitRepo, signed or
// not, and that is logged once per provider. Once the shared Secret has a
// key for any provider, nothing is taken unsigned (a forged push claiming
// another provider included), and a GitRepo with its own webhookSecret
// always needs a valid signature.
func TestAllowUnsigned(t *testing.T) {
	// The shared Secret exists without keys; the other has a GitLab key.
	system := webhookSecret(t, map[string][]byte{})
	keyed := webhookSecret(t, map[string][]byte{string(payload.GitLab): []byte("gitlab-token")})
	ns := newNamespace(t, "unsigned")
	url := "https://git.example.com/unsigned/app.git"
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: url, Branch: "main"})
	ownURL := "https://git.example.com/unsigned/own.git"
	webhookSecretIn(t, ns, "own-hook", map[string][]byte{string(payload.GitLab): []byte("own-token")})
	createRepo(t, ns, "own", fleet.GitRepoSpec{Repo: ownURL, Branch: "main", WebhookSecret: "own-hook"})

	hdr, body := webhooktest.Push(payload.GitHub, url, commit)

	strict, strictLists := markingHandler(t, system, false)
	if code, _ := send(strict, http.MethodPost, hdr.Clone(), body, nil); code != http.StatusUnauthorized {
		t.Fatalf("unsigned push, by default: %d, want 401", code)
	}
	if got := mark(t, ns, "app"); got != "" {
		t.Fatalf("refused push marked the GitRepo with %q", got)
	}
	if n := strictLists.count(); n != 0 {
		t.Fatalf("refused unsigned push listed GitRepos %d times", n)
	}

	h, _ := markingHandler(t, system, true)
	logs := &logLines{}
	if code, msg := send(h, http.MethodPost, hdr.Clone(), body, logs); code != http.StatusOK {
		t.Fatalf("unsigned push for a provider without a key, allowed: %d %s", code, msg)
	}
	if got := mark(t, ns, "app"); got != commit {
		t.Fatalf("accepted unsigned push: GitRepo marked %q, want %q", got, commit)
	}
	// Fleet ignores a signature it has no key for; so does the opt-in.
	hdr2, body2 := webhooktest.Push(payload.GitHub, url, commit2)
	webhooktest.Sign(payload.GitHub, hdr2, body2, "a-secret-fleet-does-not-know")
	if code, msg := send(h, http.MethodPost, hdr2, body2, logs); code != http.StatusOK {
		t.Fatalf("signed push for a provider without a key, allowed: %d %s", code, msg)
	}
	if got := mark(t, ns, "app"); got != commit2 {
		t.Fatalf("GitRepo marked %q, want %q", got, commit2)
	}
	if n := logs.count("taking unverified webhooks"); n != 1 {
		t.Fatalf("two unverified GitHub pushes logged %d times, want once:\n%s", n, strings.Join(logs.lines, "\n"))
	}

	// A shared Secret with a GitLab key: an unsigned push claiming
	// GitHub, which has no key, is refused too; GitLab's unsigned and
	// wrongly signed pushes are refused; nothing is marked.
	hk, _ := markingHandler(t, keyed, true)
	if code, _ := send(hk, http.MethodPost, hdr.Clone(), body, nil); code != http.StatusUnauthorized {
		t.Fatalf("unsigned GitHub push while the shared Secret has a key: %d, want 401", code)
	}
	glHdr, glBody := webhooktest.Push(payload.GitLab, url, commit3)
	if code, _ := send(hk, http.MethodPost, glHdr.Clone(), glBody, nil); code != http.StatusUnauthorized {
		t.Fatalf("unsigned push for a provider with a key: %d, want 401", code)
	}
	wrong := glHdr.Clone()
	webhooktest.Sign(payload.GitLab, wrong, glBody, "not-the-token")
	if code, _ := send(hk, http.MethodPost, wrong, glBody, nil); code != http.StatusForbidden {
		t.Fatalf("wrongly signed push for a provider with a key: %d, want 403", code)
	}
	if got := mark(t, ns, "app"); got != commit2 {
		t.Fatalf("refused GitLab pushes changed the mark to %q", got)
	}
	right := glHdr.Clone()
	webhooktest.Sign(payload.GitLab, right, glBody, "gitlab-token")
	if code, _ := send(hk, http.MethodPost, right, glBody, nil); code != http.StatusOK {
		t.Fatalf("signed GitLab push: %d", code)
	}
	if got := mark(t, ns, "app"); got != commit3 {
		t.Fatalf("signed GitLab push: GitRepo marked %q, want %q", got, commit3)
	}

	// A GitRepo naming its own webhookSecret wants signed webhooks, even
	// from a provider its Secret has no key for.
	ownHdr, ownBody := webhooktest.Push(payload.GitHub, ownURL, commit)
	if code, _ := send(h, http.MethodPost, ownHdr, ownBody, nil); code != http.StatusUnauthorized {
		t.Fatalf("unsigned push for a GitRepo with its own webhookSecret: %d, want 401", code)
	}
	if got := mark(t, ns, "own"); got != "" {
		t.Fatalf("GitRepo with its own webhookSecret marked %q by an unsigned push", got)
	}
}

// TestUnsignedPing: GitHub pings a new webhook; an unsigned ping is
// answered 200 without reading anything from the API server. A ping signed
// with the wrong secret is still refused, so a wrong secret shows on
// GitHub's webhook page at once.
func TestUnsignedPing(t *testing.T) {
	system := webhookSecret(t, webhooktest.SecretData("shared"))
	h, lists := markingHandler(t, system, false)
	hdr, _ := webhooktest.Push(payload.GitHub, "https://git.example.com/ping/app.git", commit)
	hdr.Set("X-GitHub-Event", "ping")
	body := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
	if code, msg := send(h, http.MethodPost, hdr.Clone(), body, nil); code != http.StatusOK {
		t.Fatalf("unsigned ping: %d %s", code, msg)
	}
	if n := lists.count(); n != 0 {
		t.Fatalf("unsigned ping listed GitRepos %d times", n)
	}
	wrong := hdr.Clone()
	webhooktest.Sign(payload.GitHub, wrong, body, "wrong")
	if code, _ := send(h, http.MethodPost, wrong, body, nil); code != http.StatusForbidden {
		t.Fatalf("wrongly signed ping: %d, want 403", code)
	}
	right := hdr.Clone()
	webhooktest.Sign(payload.GitHub, right, body, "shared")
	if code, _ := send(h, http.MethodPost, right, body, nil); code != http.StatusOK {
		t.Fatalf("signed ping: %d", code)
	}
}

// TestHealthChecks: load balancers' health checks (GET or HEAD of "/",
// without any provider header) get 200 and change nothing; even a GET
// carrying a signed push does not trigger. Other methods get 405, and a
// POST without provider headers 400.
func TestHealthChecks(t *testing.T) {
	system := webhookSecret(t, webhooktest.SecretData("shared"))
	ns := newNamespace(t, "health")
	url := "https://git.example.com/health/app.git"
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: url, Branch: "main"})
	h, lists := markingHandler(t, system, false)

	if code, msg := send(h, http.MethodGet, nil, nil, nil); code != http.StatusOK || msg != "ok\n" {
		t.Fatalf("GET /: %d %q", code, msg)
	}
	if code, _ := send(h, http.MethodHead, nil, nil, nil); code != http.StatusOK {
		t.Fatalf("HEAD /: %d", code)
	}
	hdr, body := webhooktest.Push(payload.GitHub, url, commit)
	webhooktest.Sign(payload.GitHub, hdr, body, "shared")
	if code, _ := send(h, http.MethodGet, hdr.Clone(), body, nil); code != http.StatusOK {
		t.Fatalf("GET with a signed push: %d", code)
	}
	if got := mark(t, ns, "app"); got != "" {
		t.Fatalf("a GET marked the GitRepo with %q", got)
	}
	if n := lists.count(); n != 0 {
		t.Fatalf("health checks listed GitRepos %d times", n)
	}
	if code, _ := send(h, http.MethodPut, hdr.Clone(), body, nil); code != http.StatusMethodNotAllowed {
		t.Fatalf("PUT: %d, want 405", code)
	}
	if code, msg := send(h, http.MethodPost, http.Header{}, body, nil); code != http.StatusBadRequest || !strings.Contains(msg, "unknown webhook provider") {
		t.Fatalf("POST without provider headers: %d %q, want 400", code, msg)
	}
	// The same push as a POST is taken: the GETs above were not refused
	// for want of a valid request.
	if code, _ := send(h, http.MethodPost, hdr.Clone(), body, nil); code != http.StatusOK {
		t.Fatalf("POST of the signed push: %d", code)
	}
	if got := mark(t, ns, "app"); got != commit {
		t.Fatalf("signed push: GitRepo marked %q, want %q", got, commit)
	}
}

// TestBitbucketUUIDWithSignature: with Fleet's `bitbucket` key holding the
// webhook's UUID, a Bitbucket Cloud push that also carries a signature (the
// webhook got a secret on Bitbucket's side) is taken when X-Hook-UUID is
// the key, as Fleet takes it; with another UUID it is refused.
func TestBitbucketUUIDWithSignature(t *testing.T) {
	system := webhookSecret(t, map[string][]byte{string(payload.Bitbucket): []byte(webhooktest.BitbucketHookUUID)})
	ns := newNamespace(t, "bbsig")
	url := "https://bitbucket.org/example/bbsig"
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: url, Branch: "main"})
	h, _ := markingHandler(t, system, false)

	hdr, body := webhooktest.Push(payload.Bitbucket, url, commit)
	webhooktest.Sign(payload.Bitbucket, hdr, body, "secret-set-on-bitbucket")
	other := hdr.Clone()
	other.Set("X-Hook-UUID", "00000000-0000-0000-0000-000000000000")
	if code, _ := send(h, http.MethodPost, other, body, nil); code != http.StatusForbidden {
		t.Fatalf("signed with an unknown secret, other UUID: %d, want 403", code)
	}
	if got := mark(t, ns, "app"); got != "" {
		t.Fatalf("refused push marked the GitRepo with %q", got)
	}
	if code, msg := send(h, http.MethodPost, hdr, body, nil); code != http.StatusOK {
		t.Fatalf("signed with an unknown secret, UUID is the key: %d %s", code, msg)
	}
	if got := mark(t, ns, "app"); got != commit {
		t.Fatalf("GitRepo marked %q, want %q", got, commit)
	}
}

// TestLargePush: GitHub sends payloads of up to 25 MB; a signed 20 MiB
// push marks its GitRepo, and a body over webhook.MaxBodyBytes gets 413.
func TestLargePush(t *testing.T) {
	system := webhookSecret(t, webhooktest.SecretData("shared"))
	ns := newNamespace(t, "large")
	url := "https://git.example.com/large/app.git"
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: url, Branch: "main"})
	h, _ := markingHandler(t, system, false)

	padded := func(size int) (http.Header, []byte) {
		hdr, body := webhooktest.Push(payload.GitHub, url, commit)
		// A field the decoder ignores, as the long file lists of a real
		// large push are to the receiver.
		rest := bytes.TrimPrefix(bytes.TrimSpace(body), []byte("{"))
		const open, closing = `{"padding":"`, `",`
		pad := strings.Repeat("x", size-len(open)-len(closing)-len(rest))
		body = append([]byte(open+pad+closing), rest...)
		webhooktest.Sign(payload.GitHub, hdr, body, "shared")
		return hdr, body
	}
	hdr, body := padded(20 << 20)
	if len(body) != 20<<20 {
		t.Fatalf("body of %d bytes, want 20 MiB", len(body))
	}
	if code, msg := send(h, http.MethodPost, hdr, body, nil); code != http.StatusOK {
		t.Fatalf("20 MiB push: %d %s", code, msg)
	}
	if got := mark(t, ns, "app"); got != commit {
		t.Fatalf("20 MiB push: GitRepo marked %q, want %q", got, commit)
	}
	hdr, body = padded(webhook.MaxBodyBytes + 1)
	if code, _ := send(h, http.MethodPost, hdr, body, nil); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over MaxBodyBytes: %d, want 413", code)
	}
}

// blockingBody is a request body that sends nothing until released, as a
// slow sender does.
type blockingBody struct{ release chan struct{} }

func (b *blockingBody) Read(p []byte) (int, error) {
	<-b.release
	return 0, io.EOF
}

// TestConcurrentBodiesBounded: no more than MaxConcurrentBodies request
// bodies are read at once (each up to MaxBodyBytes in memory); a request
// beyond that waits BusyWait for a slot and is answered 503 without
// marking anything, and once the slow senders are done a push is taken
// again.
func TestConcurrentBodiesBounded(t *testing.T) {
	system := webhookSecret(t, webhooktest.SecretData("shared"))
	ns := newNamespace(t, "busy")
	url := "https://git.example.com/busy/app.git"
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: url, Branch: "main"})
	h, _ := markingHandler(t, system, false)
	h.BusyWait = 200 * time.Millisecond

	release := make(chan struct{})
	var wg sync.WaitGroup
	for range webhook.MaxConcurrentBodies {
		hdr, _ := webhooktest.Push(payload.GitHub, url, commit)
		webhooktest.Sign(payload.GitHub, hdr, []byte("{}"), "shared")
		r := httptest.NewRequest(http.MethodPost, "/", &blockingBody{release: release})
		r.Header = hdr
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.ServeHTTP(httptest.NewRecorder(), r)
		}()
	}
	hdr, body := webhooktest.Push(payload.GitHub, url, commit)
	webhooktest.Sign(payload.GitHub, hdr, body, "shared")
	// The slow senders take their slots asynchronously: ask until the
	// receiver is full.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := send(h, http.MethodPost, hdr, body, nil)
		if code == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a request beyond %d slow bodies got %d, want 503", webhook.MaxConcurrentBodies, code)
		}
		// It went through before every slot was taken: undo its mark so
		// that the check below means something.
		unmark(t, ns, "app")
	}
	if got := mark(t, ns, "app"); got != "" {
		t.Fatalf("refused request marked the GitRepo with %q", got)
	}
	close(release)
	wg.Wait()
	if code, msg := send(h, http.MethodPost, hdr, body, nil); code != http.StatusOK {
		t.Fatalf("after the slow senders: %d %s", code, msg)
	}
	if got := mark(t, ns, "app"); got != commit {
		t.Fatalf("GitRepo marked %q, want %q", got, commit)
	}
}

// unmark removes the receiver's mark from the GitRepo.
func unmark(t *testing.T, ns, name string) {
	t.Helper()
	var gr fleet.GitRepo
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &gr); err != nil {
		t.Fatal(err)
	}
	delete(gr.Annotations, gitops.WebhookCommitAnnotation)
	if err := env.Client.Update(context.Background(), &gr); err != nil {
		t.Fatal(err)
	}
}
