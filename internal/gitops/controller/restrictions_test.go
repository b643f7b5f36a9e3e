package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// countingProxy forwards to a git server and records every request, so a
// test can show that nothing (and so no credential) reached the server.
type countingProxy struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string
}

func newCountingProxy(t testing.TB, backend string) *countingProxy {
	t.Helper()
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &countingProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.requests = append(p.requests, r.Method+" "+r.URL.Path)
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *countingProxy) URLFor(r *gittest.Repo) string { return p.URL + "/" + r.Name }

func (p *countingProxy) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

// waitRestricted waits until the GitRepo is refused by its namespace's
// restrictions: Accepted=False, Ready=False and Stalled=True with the
// restriction reason and a message containing s.
func waitRestricted(t testing.TB, ns, name, s string) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, name)
		for _, typ := range []string{fleet.ConditionAccepted, fleet.ConditionReady, fleet.ConditionStalled} {
			want := metav1.ConditionFalse
			if typ == fleet.ConditionStalled {
				want = metav1.ConditionTrue
			}
			c := condition(r, typ)
			if c == nil || c.Status != want || c.Reason != gitops.ReasonRestricted || !strings.Contains(c.Message, s) {
				return fmt.Errorf("%s = %+v", typ, c)
			}
		}
		return nil
	})
}

// restrictionEvents counts the Warning events about the GitRepo with the
// restriction reason.
func restrictionEvents(t testing.TB, ns, name string) int {
	t.Helper()
	var evs eventsv1.EventList
	if err := env.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning && e.Reason == gitops.ReasonRestricted {
			n++
		}
	}
	return n
}

// TestRestrictedRepoIsNeverContacted: a GitRepo whose repo no
// GitRepoRestriction of its namespace allows is refused before any git
// request, so the namespace's default credentials (Secret gitcredential)
// never reach that server; the GitRepo is not accepted and stalled, with a
// Warning event. Allowing the repo lifts it without waiting for a poll.
func TestRestrictedRepoIsNeverContacted(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "restricted")
	restriction := &fleet.GitRepoRestriction{
		ObjectMeta:            metav1.ObjectMeta{Namespace: ns, Name: "only-example"},
		AllowedRepoPatterns:   []string{`^https://git\.example\.com/`},
		DefaultServiceAccount: "deployer", AllowedServiceAccounts: []string{"deployer"},
	}
	if err := env.Client.Create(ctx, restriction); err != nil {
		t.Fatal(err)
	}
	secret(t, ns, gitops.DefaultClientSecretName, corev1.SecretTypeBasicAuth, map[string][]byte{"username": []byte("fleet"), "password": []byte("pa55")})
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "fleet", Password: "pa55"})
	proxy := newCountingProxy(t, srv.URL)

	createRepo(t, ns, "forbidden", fleet.GitRepoSpec{Repo: proxy.URLFor(repo)})
	waitRestricted(t, ns, "forbidden", "is not allowed")
	if got := proxy.Requests(); len(got) != 0 {
		t.Fatalf("a restricted repo was contacted: %v", got)
	}
	if n := len(bundlesOf(t, ns, "forbidden")); n != 0 {
		t.Fatalf("%d bundles", n)
	}
	fleettest.Eventually(t, timeout, func() error {
		if n := restrictionEvents(t, ns, "forbidden"); n != 1 {
			return fmt.Errorf("%d Warning events", n)
		}
		return nil
	})

	// Allowing the server: the GitRepo syncs (with the default
	// credentials) without waiting for a poll.
	u, err := url.Parse(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	restriction.AllowedRepoPatterns = append(restriction.AllowedRepoPatterns, `^http://`+regexp.QuoteMeta(u.Hostname())+`:\d+/`)
	if err := env.Client.Update(ctx, restriction); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ns, "forbidden", c1, 1)
	if got := getRepo(t, ns, "forbidden").Spec.ClientSecretName; got != "" {
		t.Fatalf("clientSecretName written into the spec: %q", got)
	}

	// A service account the restrictions do not allow is refused before
	// any request, too.
	other := newCountingProxy(t, srv.URL)
	createRepo(t, ns, "bad-sa", fleet.GitRepoSpec{Repo: other.URLFor(repo), ServiceAccount: "cluster-admin"})
	waitRestricted(t, ns, "bad-sa", `serviceAccount "cluster-admin"`)
	if got := other.Requests(); len(got) != 0 {
		t.Fatalf("a GitRepo with a forbidden service account was fetched: %v", got)
	}
}

// TestRestrictedClientSecrets: defaultClientSecretName is used for a
// GitRepo without clientSecretName (the server takes only those
// credentials) without being written into its spec; a clientSecretName
// outside allowedClientSecretNames is refused before any request, and so
// is the implicit Secret gitcredential when it is not allowed.
func TestRestrictedClientSecrets(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "client-secrets")
	if err := env.Client.Create(ctx, &fleet.GitRepoRestriction{
		ObjectMeta:              metav1.ObjectMeta{Namespace: ns, Name: "team"},
		DefaultClientSecretName: "team-creds", AllowedClientSecretNames: []string{"team-creds"},
	}); err != nil {
		t.Fatal(err)
	}
	creds := map[string][]byte{"username": []byte("fleet"), "password": []byte("pa55")}
	secret(t, ns, "team-creds", corev1.SecretTypeBasicAuth, creds)
	// Valid credentials too: only the restriction stands in the way.
	secret(t, ns, "admin-creds", corev1.SecretTypeBasicAuth, creds)
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "fleet", Password: "pa55"})

	createRepo(t, ns, "defaulted", fleet.GitRepoSpec{Repo: srv.URLFor(repo)})
	waitSynced(t, ns, "defaulted", c1, 1)
	if got := getRepo(t, ns, "defaulted").Spec.ClientSecretName; got != "" {
		t.Fatalf("clientSecretName written into the spec: %q", got)
	}

	proxy := newCountingProxy(t, srv.URL)
	createRepo(t, ns, "admin", fleet.GitRepoSpec{Repo: proxy.URLFor(repo), ClientSecretName: "admin-creds"})
	waitRestricted(t, ns, "admin", `clientSecretName "admin-creds" is not allowed`)

	// No default, and gitcredential not allowed: a GitRepo without
	// clientSecretName would send it, so it is refused.
	ns2 := newNamespace(t, "implicit-secret")
	if err := env.Client.Create(ctx, &fleet.GitRepoRestriction{
		ObjectMeta:               metav1.ObjectMeta{Namespace: ns2, Name: "team"},
		AllowedClientSecretNames: []string{"team-creds"},
	}); err != nil {
		t.Fatal(err)
	}
	secret(t, ns2, gitops.DefaultClientSecretName, corev1.SecretTypeBasicAuth, creds)
	createRepo(t, ns2, "implicit", fleet.GitRepoSpec{Repo: proxy.URLFor(repo)})
	waitRestricted(t, ns2, "implicit", gitops.DefaultClientSecretName)

	if got := proxy.Requests(); len(got) != 0 {
		t.Fatalf("refused GitRepos contacted the server: %v", got)
	}
}
