package webhook_test

import (
	"bytes"
	"net/http"
	"slices"
	"testing"
	"time"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
	"github.com/fleetgo/fleet/internal/gitops/webhook/webhooktest"
)

// withRef rewrites the recorded push (of refs/heads/main) to another ref.
func withRef(body []byte, ref string) []byte {
	return bytes.ReplaceAll(body, []byte(`"refs/heads/main"`), []byte(`"`+ref+`"`))
}

// TestRevisionMatching: a push wakes the GitRepos whose revision it can
// move: the branch or tag of that name, HEAD on a push to the default
// branch the payload names, never a commit SHA; and GitRepos following a
// branch on a push to it.
func TestRevisionMatching(t *testing.T) {
	system := webhookSecret(t, webhooktest.SecretData("shared"))
	ns := newNamespace(t, "revisions")
	url := "https://git.example.com/revisions/app.git"
	for name, spec := range map[string]fleet.GitRepoSpec{
		"main":        {Repo: url, Branch: "main"},
		"rev-release": {Repo: url, Revision: "release"},
		"rev-v1":      {Repo: url, Revision: "v1"},
		"head":        {Repo: url, Revision: "HEAD"},
		"sha":         {Repo: url, Revision: commit},
	} {
		createRepo(t, ns, name, spec)
	}
	h, _, tr := newHandler(t, system, time.Hour)
	for ref, want := range map[string][]string{
		"refs/heads/main":    {"head", "main"},
		"refs/heads/release": {"rev-release"},
		"refs/tags/v1":       {"rev-v1"},
		"refs/heads/v1":      {"rev-v1"},
		"refs/tags/release":  {"rev-release"},
		"refs/heads/other":   nil,
	} {
		hdr, body := webhooktest.Push(payload.GitHub, url, commit)
		body = withRef(body, ref)
		webhooktest.Sign(payload.GitHub, hdr, body, "shared")
		if code := post(h, hdr, body); code != http.StatusOK {
			t.Fatalf("%s: %d", ref, code)
		}
		if got := tr.take(); !slices.Equal(got, want) {
			t.Errorf("push of %s triggered %v, want %v", ref, got, want)
		}
	}

	// Bitbucket's payload does not name the default branch: HEAD is woken
	// by any branch push, and its poll finds out whether HEAD moved.
	hdr, body := webhooktest.Push(payload.Bitbucket, url, commit)
	body = bytes.Replace(body, []byte(`"name": "main"`), []byte(`"name": "other"`), 1)
	webhooktest.Sign(payload.Bitbucket, hdr, body, "shared")
	if code := post(h, hdr, body); code != http.StatusOK {
		t.Fatalf("bitbucket: %d", code)
	}
	if got := tr.take(); !slices.Equal(got, []string{"head"}) {
		t.Errorf("bitbucket push of other triggered %v, want [head]", got)
	}
}

// TestBitbucketCloudUUID: an existing Bitbucket Cloud webhook, without a
// secret, is taken when its X-Hook-UUID is the `bitbucket` key (Fleet's
// meaning of that key), and refused without triggering anything when the
// UUID is another or missing.
func TestBitbucketCloudUUID(t *testing.T) {
	system := webhookSecret(t, map[string][]byte{string(payload.Bitbucket): []byte(webhooktest.BitbucketHookUUID)})
	ns := newNamespace(t, "bitbucket")
	url := "https://bitbucket.org/example/fleet-apps"
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: url, Branch: "main"})
	h, _, tr := newHandler(t, system, time.Hour)
	hdr, body := webhooktest.Push(payload.Bitbucket, url, commit)

	if code := post(h, hdr.Clone(), body); code != http.StatusOK {
		t.Fatalf("matching UUID: %d", code)
	}
	if got := tr.take(); !slices.Equal(got, []string{"app"}) {
		t.Fatalf("matching UUID triggered %v", got)
	}
	wrong := hdr.Clone()
	wrong.Set("X-Hook-UUID", "00000000-0000-0000-0000-000000000000")
	none := hdr.Clone()
	none.Del("X-Hook-UUID")
	for name, hh := range map[string]http.Header{"wrong UUID": wrong, "no UUID": none} {
		if code := post(h, hh, body); code != http.StatusUnauthorized {
			t.Fatalf("%s: %d", name, code)
		}
	}
	if got := tr.take(); len(got) != 0 {
		t.Fatalf("refused requests triggered %v", got)
	}
}
