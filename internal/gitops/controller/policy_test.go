package controller_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

func createPolicy(t testing.TB, p *fleet.Policy) {
	t.Helper()
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// hostPattern is an allowedRepoPatterns entry for every repo of the
// server at base.
func hostPattern(t testing.TB, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return `http://` + regexp.QuoteMeta(u.Host) + `/.*`
}

// TestPolicyRefusesRepo: a GitRepo whose repo matches none of the
// Policy's gitRepo.allowedRepoPatterns is refused before any git request:
// Accepted=False and Stalled with a message naming the field and the
// patterns, one Warning event, no Bundle. Relaxing the Policy lets it sync
// at once, without any change to the GitRepo; so does deleting a refusing
// Policy. A URL with credentials in it is never quoted.
func TestPolicyRefusesRepo(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "policy-repo")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	proxy := newCountingProxy(t, srv.URL)

	policy := &fleet.Policy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
		GitRepo:    &fleet.GitRepoPolicy{AllowedRepoPatterns: []string{`https://git\.example\.com/.*`}},
	}
	createPolicy(t, policy)
	createRepo(t, ns, "forbidden", fleet.GitRepoSpec{Repo: proxy.URLFor(repo)})
	waitRestricted(t, ns, "forbidden", `spec.repo "`+proxy.URLFor(repo)+`" is not allowed by Policy tenant: it matches none of gitRepo.allowedRepoPatterns`)
	if got := proxy.Requests(); len(got) != 0 {
		t.Fatalf("a refused repo was contacted: %v", got)
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

	// Credentials written into the URL stay out of the condition and the
	// events.
	withCreds := strings.Replace(proxy.URLFor(repo), "http://", "http://fleet:t0ps3cret@", 1)
	createRepo(t, ns, "with-creds", fleet.GitRepoSpec{Repo: withCreds})
	waitRestricted(t, ns, "with-creds", `spec.repo "http://***@`)
	if msg := condition(getRepo(t, ns, "with-creds"), fleet.ConditionReady).Message; strings.Contains(msg, "t0ps3cret") {
		t.Fatalf("condition quotes the password: %s", msg)
	}
	fleettest.Eventually(t, timeout, func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		seen := false
		for _, e := range evs.Items {
			if strings.Contains(e.Note, "t0ps3cret") {
				t.Fatalf("event quotes the password: %s", e.Note)
			}
			seen = seen || e.Regarding.Name == "with-creds"
		}
		if !seen {
			return fmt.Errorf("no event for with-creds")
		}
		return nil
	})

	// Relaxing the Policy: the GitRepo syncs without waiting for a poll,
	// and its spec is as the user wrote it.
	policy.GitRepo.AllowedRepoPatterns = append(policy.GitRepo.AllowedRepoPatterns, hostPattern(t, proxy.URL))
	if err := env.Client.Update(ctx, policy); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ns, "forbidden", c1, 1)
	if got := getRepo(t, ns, "forbidden"); got.Generation != 1 || got.Spec.ServiceAccount != "" || got.Spec.ClientSecretName != "" {
		t.Fatalf("GitRepo changed: generation %d, spec %+v", got.Generation, got.Spec)
	}

	// Deleting a refusing Policy lifts the refusal.
	ns2 := newNamespace(t, "policy-delete")
	refusing := &fleet.Policy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns2, Name: "strict"},
		GitRepo:    &fleet.GitRepoPolicy{AllowedRepoPatterns: []string{`https://git\.example\.com/.*`}},
	}
	createPolicy(t, refusing)
	createRepo(t, ns2, "later", fleet.GitRepoSpec{Repo: srv.URLFor(repo)})
	waitRestricted(t, ns2, "later", "gitRepo.allowedRepoPatterns")
	if err := env.Client.Delete(ctx, refusing); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ns2, "later", c1, 1)
	if got := getRepo(t, ns2, "later"); got.Generation != 1 {
		t.Fatalf("GitRepo changed: generation %d", got.Generation)
	}
}

// TestPolicyInvalidPattern: an invalid pattern refuses the GitRepo with a
// message naming the Policy and the pattern.
func TestPolicyInvalidPattern(t *testing.T) {
	ns := newNamespace(t, "policy-invalid")
	createPolicy(t, &fleet.Policy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"},
		GitRepo:    &fleet.GitRepoPolicy{AllowedRepoPatterns: []string{`https://(git`}},
	})
	proxy := newCountingProxy(t, "http://127.0.0.1:1")
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: proxy.URL + "/app"})
	waitRestricted(t, ns, "app", `Policy broken: invalid gitRepo.allowedRepoPatterns entry "https://(git"`)
	if got := proxy.Requests(); len(got) != 0 {
		t.Fatalf("contacted: %v", got)
	}
}

// TestPolicyServiceAccount: requireServiceAccount refuses a GitRepo
// without one; the Policy's gitRepo.defaultServiceAccount fills it in on
// the Bundles (not in the GitRepo's spec); allowedServiceAccounts refuses
// any other.
func TestPolicyServiceAccount(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})

	ns := newNamespace(t, "policy-require")
	policy := &fleet.Policy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "require"}, RequireServiceAccount: true}
	createPolicy(t, policy)
	createRepo(t, ns, "no-sa", fleet.GitRepoSpec{Repo: srv.URLFor(repo)})
	waitRestricted(t, ns, "no-sa", "serviceAccount is empty, and Policy require requires one")
	if n := len(bundlesOf(t, ns, "no-sa")); n != 0 {
		t.Fatalf("%d bundles", n)
	}

	// A default in a Policy: the Bundle gets it, the GitRepo does not.
	policy.GitRepo = &fleet.GitRepoPolicy{DefaultServiceAccount: "tenant"}
	policy.AllowedServiceAccounts = []string{"tenant"}
	if err := env.Client.Update(ctx, policy); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ns, "no-sa", c1, 1)
	for name, b := range bundlesOf(t, ns, "no-sa") {
		if b.Spec.ServiceAccount != "tenant" {
			t.Fatalf("bundle %s: serviceAccount %q, want the Policy's default", name, b.Spec.ServiceAccount)
		}
	}
	if got := getRepo(t, ns, "no-sa"); got.Spec.ServiceAccount != "" || got.Generation != 1 {
		t.Fatalf("GitRepo changed: generation %d, serviceAccount %q", got.Generation, got.Spec.ServiceAccount)
	}

	// A new default reaches the Bundles at once, without a new commit.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
		t.Fatal(err)
	}
	policy.GitRepo.DefaultServiceAccount = "tenant-2"
	policy.AllowedServiceAccounts = []string{"tenant", "tenant-2"}
	if err := env.Client.Update(ctx, policy); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var sas []string
		for _, b := range bundlesOf(t, ns, "no-sa") {
			sas = append(sas, b.Spec.ServiceAccount)
		}
		if len(sas) > 0 && !slices.ContainsFunc(sas, func(sa string) bool { return sa != "tenant-2" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bundles' serviceAccounts %q after the Policy's default changed, want tenant-2", sas)
		}
		time.Sleep(200 * time.Millisecond)
	}

	createRepo(t, ns, "admin", fleet.GitRepoSpec{Repo: srv.URLFor(repo), ServiceAccount: "cluster-admin"})
	waitRestricted(t, ns, "admin", `serviceAccount "cluster-admin" is not allowed by Policy require`)
}

// TestPolicyDefaultSecretMeetsRestrictions: a Policy's
// defaultClientSecretName must pass the namespace's GitRepoRestrictions
// too; their own default comes first.
func TestPolicyDefaultSecretMeetsRestrictions(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "policy-grr")
	if err := env.Client.Create(ctx, &fleet.GitRepoRestriction{
		ObjectMeta:               metav1.ObjectMeta{Namespace: ns, Name: "team"},
		AllowedClientSecretNames: []string{"team-creds"},
	}); err != nil {
		t.Fatal(err)
	}
	createPolicy(t, &fleet.Policy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
		GitRepo:    &fleet.GitRepoPolicy{DefaultClientSecretName: "admin-creds"},
	})
	proxy := newCountingProxy(t, "http://127.0.0.1:1")
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: proxy.URL + "/app"})
	waitRestricted(t, ns, "app", `clientSecretName "admin-creds", the default of the Policies, is not allowed by the GitRepoRestrictions`)
	if got := proxy.Requests(); len(got) != 0 {
		t.Fatalf("contacted: %v", got)
	}
}
