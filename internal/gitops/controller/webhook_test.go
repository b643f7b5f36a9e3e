package controller_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/gitops/webhook"
	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
	"github.com/fleetgo/fleet/internal/gitops/webhook/webhooktest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

func postWebhook(t testing.TB, h http.Header, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+webhookAddr+"/", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// webhookMark is the commit the webhook receiver marked the GitRepo with
// (the annotation it patches before it answers), read from the API server.
func webhookMark(t testing.TB, ns, name string) string {
	t.Helper()
	return getRepo(t, ns, name).Annotations[gitops.WebhookCommitAnnotation]
}

// TestWebhooks: for each provider a recorded push payload, signed with the
// shared secret, makes the GitRepo sync the pushed commit at once (polling
// is set to an hour, so nothing else could); unsigned and wrongly signed
// requests are refused with 4xx and change nothing.
func TestWebhooks(t *testing.T) {
	ns := newNamespace(t, "webhook")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c := repo.Commit("main", map[string]string{"cm.yaml": configMap("a", "0")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	url := srv.URLFor(repo)
	secret(t, systemNamespace, webhook.DefaultSecretName, corev1.SecretTypeOpaque, webhooktest.SecretData("shared-s3cret"))

	createRepo(t, ns, "hooked", fleet.GitRepoSpec{Repo: url, Branch: "main", PollingInterval: &metav1.Duration{Duration: time.Hour}})
	waitSynced(t, ns, "hooked", c, 1)

	for i, p := range webhooktest.Providers {
		t.Run(string(p), func(t *testing.T) {
			before := getRepo(t, ns, "hooked").Status.Commit
			next := repo.Commit("main", map[string]string{"cm.yaml": configMap("a", fmt.Sprint(i+1))})
			h, body := webhooktest.Push(p, url, next)

			if code := postWebhook(t, h.Clone(), body); code != http.StatusUnauthorized {
				t.Fatalf("unsigned: %d", code)
			}
			wrong := h.Clone()
			webhooktest.Sign(p, wrong, body, "not-the-secret")
			if code := postWebhook(t, wrong, body); code < 400 || code >= 500 {
				t.Fatalf("wrong signature: %d", code)
			}
			time.Sleep(time.Second)
			if r := getRepo(t, ns, "hooked"); r.Status.Commit != before || r.Status.WebhookCommit == next {
				t.Fatalf("refused webhook changed status: commit %q webhookCommit %q", r.Status.Commit, r.Status.WebhookCommit)
			}

			signed := h.Clone()
			webhooktest.Sign(p, signed, body, "shared-s3cret")
			if code := postWebhook(t, signed, body); code != http.StatusOK {
				t.Fatalf("signed: %d", code)
			}
			fleettest.Eventually(t, timeout, func() error {
				r := getRepo(t, ns, "hooked")
				if r.Status.WebhookCommit != next || r.Status.LastWebhookTime == nil {
					return fmt.Errorf("webhookCommit %q", r.Status.WebhookCommit)
				}
				if r.Status.Commit != next {
					return fmt.Errorf("commit %q, want %q", r.Status.Commit, next)
				}
				return nil
			})
		})
	}

	// A GitRepo with its own webhookSecret takes only that secret.
	ns2 := newNamespace(t, "webhook-own")
	repo2 := gittest.NewRepo(t, root, "own")
	c2 := repo2.Commit("main", map[string]string{"cm.yaml": configMap("b", "0")})
	secret(t, ns2, "hook", corev1.SecretTypeOpaque, map[string][]byte{"github": []byte("own-secret")})
	createRepo(t, ns2, "own", fleet.GitRepoSpec{Repo: srv.URLFor(repo2), Branch: "main", WebhookSecret: "hook", PollingInterval: &metav1.Duration{Duration: time.Hour}})
	waitSynced(t, ns2, "own", c2, 1)
	next := repo2.Commit("main", map[string]string{"cm.yaml": configMap("b", "1")})
	h, body := webhooktest.Push(payload.GitHub, srv.URLFor(repo2), next)
	shared := h.Clone()
	webhooktest.Sign(payload.GitHub, shared, body, "shared-s3cret")
	if code := postWebhook(t, shared, body); code != http.StatusForbidden {
		t.Fatalf("shared secret for a repo with its own: %d", code)
	}
	own := h.Clone()
	webhooktest.Sign(payload.GitHub, own, body, "own-secret")
	if code := postWebhook(t, own, body); code != http.StatusOK {
		t.Fatalf("own secret: %d", code)
	}
	// The receiver marks the GitRepo before it answers, so the mark is
	// there as soon as the POST returns: what makes the check below, that
	// another branch leaves no mark, able to fail.
	if got := webhookMark(t, ns2, "own"); got != next {
		t.Fatalf("webhook mark %q right after the push, want %q", got, next)
	}
	waitSynced(t, ns2, "own", next, 1)

	// A push to another branch does not trigger; an unknown sender is 400.
	// The GitRepo takes the shared secret the push is signed with, so a
	// wrongly matched branch would be taken, not refused for its signature.
	marked := webhookMark(t, ns, "hooked")
	other := repo.Commit("other", map[string]string{"cm.yaml": configMap("a", "other")})
	h, body = webhooktest.Push(payload.GitHub, url, other)
	body = bytes.Replace(body, []byte("refs/heads/main"), []byte("refs/heads/other"), 1)
	webhooktest.Sign(payload.GitHub, h, body, "shared-s3cret")
	if code := postWebhook(t, h, body); code != http.StatusOK {
		t.Fatalf("other branch: %d", code)
	}
	if got := webhookMark(t, ns, "hooked"); got != marked {
		t.Fatalf("push to another branch was taken: webhook mark %q, was %q", got, marked)
	}
	if code := postWebhook(t, http.Header{}, []byte("{}")); code != http.StatusBadRequest {
		t.Fatalf("unknown provider: %d", code)
	}

	// disablePolling: a push is not seen until a webhook says so, even with
	// a short interval.
	repo3 := gittest.NewRepo(t, root, "nopoll")
	c3 := repo3.Commit("main", map[string]string{"cm.yaml": configMap("c", "0")})
	createRepo(t, ns2, "nopoll", fleet.GitRepoSpec{Repo: srv.URLFor(repo3), Branch: "main", DisablePolling: true, PollingInterval: &metav1.Duration{Duration: 200 * time.Millisecond}})
	waitSynced(t, ns2, "nopoll", c3, 1)
	if c := condition(getRepo(t, ns2, "nopoll"), fleet.ConditionGitPolling); c == nil || c.Reason != "PollingDisabled" {
		t.Fatalf("GitPolling %+v", c)
	}
	pushed := repo3.Commit("main", map[string]string{"cm.yaml": configMap("c", "1")})
	time.Sleep(3 * time.Second)
	if r := getRepo(t, ns2, "nopoll"); r.Status.Commit != c3 {
		t.Fatalf("polled although polling is disabled: %q", r.Status.Commit)
	}
	h, body = webhooktest.Push(payload.Gitea, srv.URLFor(repo3), pushed)
	webhooktest.Sign(payload.Gitea, h, body, "shared-s3cret")
	if code := postWebhook(t, h, body); code != http.StatusOK {
		t.Fatalf("gitea push: %d", code)
	}
	waitSynced(t, ns2, "nopoll", pushed, 1)
}
