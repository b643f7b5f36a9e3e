package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/webhook"
	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
	"github.com/fleetgo/fleet/internal/gitops/webhook/webhooktest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

const commit = "0123456789abcdef0123456789abcdef01234567"

// triggers records the GitRepos a handler asked to sync.
type triggers struct {
	mu    sync.Mutex
	names []string
}

func (tr *triggers) trigger(_ context.Context, repo *fleet.GitRepo, _ *payload.Push) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.names = append(tr.names, repo.Name)
	return nil
}

// take returns the sorted names triggered since the last call.
func (tr *triggers) take() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := tr.names
	tr.names = nil
	slices.Sort(out)
	return out
}

func newHandler(t *testing.T, systemNS string, interval time.Duration) (*webhook.Handler, *gitRepoLists, *triggers) {
	t.Helper()
	reader, lists := countingReader(t)
	tr := &triggers{}
	return &webhook.Handler{Reader: reader, SystemNamespace: systemNS, Trigger: tr.trigger, ListInterval: interval}, lists, tr
}

func post(h http.Handler, hdr http.Header, body []byte) int {
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header = hdr
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// TestUnverifiedRequestsListBounded: anyone can send webhooks. Unsigned
// ones are refused before any API call; ones signed wrongly (which might
// be for a GitRepo with its own webhookSecret) are matched against a
// recent GitRepo list instead of a LIST each; a correctly signed push
// lists afresh and is taken.
func TestUnverifiedRequestsListBounded(t *testing.T) {
	const n = 20
	system := webhookSecret(t, webhooktest.SecretData("shared"))
	ns := newNamespace(t, "bounded")
	url := "https://git.example.com/bounded/app.git"
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: url, Branch: "main"})
	h, lists, tr := newHandler(t, system, time.Hour)
	hdr, body := webhooktest.Push(payload.GitHub, url, commit)

	for range n {
		if code := post(h, hdr.Clone(), body); code != http.StatusUnauthorized {
			t.Fatalf("unsigned: %d", code)
		}
	}
	if got := lists.count(); got != 0 {
		t.Fatalf("%d unsigned requests made %d GitRepo LISTs, want 0", n, got)
	}
	wrong := hdr.Clone()
	webhooktest.Sign(payload.GitHub, wrong, body, "forged")
	for range n {
		if code := post(h, wrong.Clone(), body); code != http.StatusForbidden {
			t.Fatalf("wrong signature: %d", code)
		}
	}
	if got := lists.count(); got != 1 {
		t.Fatalf("%d wrongly signed requests made %d GitRepo LISTs, want 1", n, got)
	}
	if got := tr.take(); len(got) != 0 {
		t.Fatalf("refused requests triggered %v", got)
	}
	signed := hdr.Clone()
	webhooktest.Sign(payload.GitHub, signed, body, "shared")
	if code := post(h, signed, body); code != http.StatusOK {
		t.Fatalf("signed: %d", code)
	}
	if got := tr.take(); !slices.Equal(got, []string{"app"}) {
		t.Fatalf("signed push triggered %v", got)
	}
	if got := lists.count(); got != 2 {
		t.Fatalf("after a verified push %d GitRepo LISTs, want 2", got)
	}
}

// TestOwnSecretFoundWithinInterval: a push signed with a GitRepo's own
// webhookSecret (not verifiable with the shared one) still reaches a
// GitRepo created after the last list, once the list is ListInterval old.
func TestOwnSecretFoundWithinInterval(t *testing.T) {
	system := webhookSecret(t, webhooktest.SecretData("shared"))
	ns := newNamespace(t, "own")
	url := "https://git.example.com/own/app.git"
	h, lists, tr := newHandler(t, system, 50*time.Millisecond)
	hdr, body := webhooktest.Push(payload.GitHub, url, commit)
	webhooktest.Sign(payload.GitHub, hdr, body, "own")
	if code := post(h, hdr.Clone(), body); code != http.StatusForbidden {
		t.Fatalf("no GitRepo yet: %d", code)
	}
	secretData := map[string][]byte{"github": []byte("own")}
	s := webhookSecretIn(t, ns, "hook", secretData)
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: url, Branch: "main", WebhookSecret: s})
	fleettest.Eventually(t, 30*time.Second, func() error {
		if code := post(h, hdr.Clone(), body); code != http.StatusOK {
			return fmt.Errorf("push for a new GitRepo with its own secret: %d (%d LISTs)", code, lists.count())
		}
		return nil
	})
	if got := tr.take(); !slices.Equal(got, []string{"app"}) {
		t.Fatalf("triggered %v", got)
	}
}
