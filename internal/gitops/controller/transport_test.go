package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

func createRepo(t testing.TB, ns, name string, spec fleet.GitRepoSpec) *fleet.GitRepo {
	t.Helper()
	gr := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := env.Client.Create(context.Background(), gr); err != nil {
		t.Fatal(err)
	}
	return gr
}

// waitSynced waits until the GitRepo applied commit and has n Bundles.
func waitSynced(t testing.TB, ns, name, commit string, n int) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, name)
		if r.Status.Commit != commit {
			c := condition(r, fleet.ConditionReady)
			return fmt.Errorf("commit %q (want %q), ready %+v", r.Status.Commit, commit, c)
		}
		if got := len(bundlesOf(t, ns, name)); got != n {
			return fmt.Errorf("%d bundles, want %d", got, n)
		}
		return nil
	})
}

// waitPollError waits until GitPolling is False with a message containing s.
func waitPollError(t testing.TB, ns, name, s string) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, name)
		c := condition(r, fleet.ConditionGitPolling)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, s) {
			return fmt.Errorf("GitPolling = %+v", c)
		}
		if rc := condition(r, fleet.ConditionReady); rc == nil || rc.Status != metav1.ConditionFalse {
			return fmt.Errorf("Ready = %+v", rc)
		}
		return nil
	})
}

// waitStalled waits until condition typ is False with a message containing s
// and Stalled is True: bad input, which retrying will not fix.
func waitStalled(t testing.TB, ns, name, typ, s string) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, name)
		c, st := condition(r, typ), condition(r, fleet.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, s) || st == nil || st.Status != metav1.ConditionTrue {
			return fmt.Errorf("%s %+v stalled %+v", typ, c, st)
		}
		return nil
	})
}

func TestHTTPSWithPrivateCA(t *testing.T) {
	ns := newNamespace(t, "https")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{TLS: true})

	createRepo(t, ns, "trusted", fleet.GitRepoSpec{Repo: srv.URLFor(repo), CABundle: srv.CAPEM()})
	waitSynced(t, ns, "trusted", c1, 1)

	createRepo(t, ns, "untrusted", fleet.GitRepoSpec{Repo: srv.URLFor(repo)})
	waitPollError(t, ns, "untrusted", "certificate")
	if n := len(bundlesOf(t, ns, "untrusted")); n != 0 {
		t.Fatalf("untrusted server produced %d bundles", n)
	}
}

func TestSSHWithKnownHosts(t *testing.T) {
	ns := newNamespace(t, "ssh")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewSSHServer(t, root)
	other := gittest.NewSSHServer(t, t.TempDir())

	secret(t, ns, "ssh", corev1.SecretTypeSSHAuth, map[string][]byte{
		corev1.SSHAuthPrivateKey: srv.ClientKeyPEM, "known_hosts": srv.KnownHosts,
	})
	createRepo(t, ns, "good", fleet.GitRepoSpec{Repo: srv.URLFor(repo), ClientSecretName: "ssh"})
	waitSynced(t, ns, "good", c1, 1)

	// known_hosts naming this host with another server's key: refused.
	host := strings.Fields(string(srv.KnownHosts))[0]
	wrongKey := strings.SplitN(strings.TrimSpace(string(other.KnownHosts)), " ", 2)[1]
	secret(t, ns, "ssh-wrong-host", corev1.SecretTypeSSHAuth, map[string][]byte{
		corev1.SSHAuthPrivateKey: srv.ClientKeyPEM, "known_hosts": []byte(host + " " + wrongKey + "\n"),
	})
	createRepo(t, ns, "wrong-host", fleet.GitRepoSpec{Repo: srv.URLFor(repo), ClientSecretName: "ssh-wrong-host"})
	waitPollError(t, ns, "wrong-host", "host key")
	if s := condition(getRepo(t, ns, "wrong-host"), fleet.ConditionStalled); s == nil || s.Status != metav1.ConditionTrue {
		t.Fatalf("unknown host key not stalled: %+v", s)
	}

	// A missing Secret is bad input: not accepted, stalled.
	createRepo(t, ns, "no-secret", fleet.GitRepoSpec{Repo: srv.URLFor(repo), ClientSecretName: "missing"})
	waitStalled(t, ns, "no-secret", fleet.ConditionAccepted, "missing")
	for _, name := range []string{"wrong-host", "no-secret"} {
		if n := len(bundlesOf(t, ns, name)); n != 0 {
			t.Fatalf("%s produced %d bundles", name, n)
		}
	}
}

// TestPollingBackoff points a GitRepo at a failing server and checks, on the
// times the server saw the ref lookups, that each gap is longer than the
// one before; then the server heals and the repo syncs.
func TestPollingBackoff(t *testing.T) {
	ns := newNamespace(t, "backoff")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	srv.Fail.Store(true)

	createRepo(t, ns, "flaky", fleet.GitRepoSpec{Repo: srv.URLFor(repo), PollingInterval: &metav1.Duration{Duration: 500 * time.Millisecond}})
	fleettest.Eventually(t, timeout, func() error {
		if n := len(srv.RefTimes()); n < 6 {
			return fmt.Errorf("%d attempts so far", n)
		}
		return nil
	})
	at := srv.RefTimes()
	for i := 2; i < len(at); i++ {
		prev, cur := at[i-1].Sub(at[i-2]), at[i].Sub(at[i-1])
		if cur <= prev {
			t.Fatalf("gap %d (%v) is not longer than gap %d (%v); attempts %v", i, cur, i-1, prev, at)
		}
	}
	// The controller's own record agrees with the server's.
	if got := tracker.Attempts(types.NamespacedName{Namespace: ns, Name: "flaky"}); len(got) < 6 {
		t.Fatalf("tracker recorded %d attempts", len(got))
	}
	r := getRepo(t, ns, "flaky")
	if r.Status.ConsecutiveFailures < 5 {
		t.Fatalf("consecutiveFailures %d", r.Status.ConsecutiveFailures)
	}
	srv.Fail.Store(false)
	waitSynced(t, ns, "flaky", c1, 1)
	fleettest.Eventually(t, timeout, func() error {
		if r := getRepo(t, ns, "flaky"); r.Status.ConsecutiveFailures != 0 {
			return fmt.Errorf("consecutiveFailures %d", r.Status.ConsecutiveFailures)
		}
		return nil
	})
}

// TestBadInput: a path that matches nothing, a missing branch and a hung
// server each give a clear status and no Bundles.
func TestBadInput(t *testing.T) {
	ns := newNamespace(t, "bad")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	hung := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	hung.Hang.Store(true)

	createRepo(t, ns, "no-path", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"does/not/exist"}})
	createRepo(t, ns, "no-branch", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Branch: "nope"})
	createRepo(t, ns, "hung", fleet.GitRepoSpec{Repo: hung.URLFor(repo)})

	waitStalled(t, ns, "no-path", fleet.ConditionReady, "does/not/exist")
	waitPollError(t, ns, "no-branch", "ref not found")
	waitPollError(t, ns, "hung", "timed out")
	if s := condition(getRepo(t, ns, "hung"), fleet.ConditionStalled); s == nil || s.Status != metav1.ConditionFalse {
		t.Fatalf("a hung server is transient, not stalled: %+v", s)
	}
	for _, name := range []string{"no-path", "no-branch", "hung"} {
		if n := len(bundlesOf(t, ns, name)); n != 0 {
			t.Fatalf("%s produced %d bundles", name, n)
		}
	}
}
