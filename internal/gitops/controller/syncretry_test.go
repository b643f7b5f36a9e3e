package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// refLookups counts the ref advertisements the proxy passed on: one per
// poll, and one more per fetch.
func refLookups(p *countingProxy) int {
	n := 0
	for _, r := range p.Requests() {
		if strings.HasPrefix(r, "GET") && strings.Contains(r, "info/refs") {
			n++
		}
	}
	return n
}

// TestBuildFailureKeepsPolling: while a commit cannot be built, its
// rebuild backs off but the ref lookup goes on every interval, so the
// commit that fixes it is applied soon after it is pushed, not when the
// build's backoff (by then 32 intervals) runs out.
func TestBuildFailureKeepsPolling(t *testing.T) {
	ns := newNamespace(t, "syncretry-fix")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	proxy := newCountingProxy(t, srv.URL)
	interval := 500 * time.Millisecond
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: proxy.URLFor(repo), PollingInterval: &metav1.Duration{Duration: interval}})
	waitSynced(t, ns, "app", c1, 1)

	refsBefore, fetchesBefore := refLookups(proxy), fetches(proxy)
	repo.Commit("master", map[string]string{"fleet.yaml": "helm: [}\n"})
	// Six failed builds: the next rebuild is 2^6 intervals away.
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "app")
		ready := condition(r, fleet.ConditionReady)
		if ready == nil || ready.Reason != gitops.ReasonBuildFailed || r.Status.ConsecutiveFailures < 6 {
			return fmt.Errorf("consecutiveFailures %d, ready %+v", r.Status.ConsecutiveFailures, ready)
		}
		return nil
	})
	if r := getRepo(t, ns, "app"); r.Status.Commit != c1 {
		t.Fatalf("the broken commit replaced %s: status.commit %s", c1, r.Status.Commit)
	}
	// The rebuilds backed off (no hot loop), the ref lookups did not: each
	// fetch makes one lookup, each poll another.
	refs, builds := refLookups(proxy)-refsBefore, fetches(proxy)-fetchesBefore
	if builds > 8 {
		t.Fatalf("%d fetches of the broken commit for %d consecutive failures: the rebuild does not back off", builds, getRepo(t, ns, "app").Status.ConsecutiveFailures)
	}
	if refs < 4*builds {
		t.Fatalf("%d ref lookups for %d fetches: polling backed off with the build", refs, builds)
	}

	c3 := repo.Commit("master", map[string]string{"fleet.yaml": "defaultNamespace: fixed\n"})
	// 30 intervals: the failing build's own backoff is longer.
	fleettest.Eventually(t, 30*interval, func() error {
		r := getRepo(t, ns, "app")
		if r.Status.Commit != c3 {
			return fmt.Errorf("status.commit %s, want the fix %s (consecutiveFailures %d)", r.Status.Commit, c3, r.Status.ConsecutiveFailures)
		}
		return nil
	})
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "app")
		if ready := condition(r, fleet.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue || r.Status.ConsecutiveFailures != 0 {
			return fmt.Errorf("ready %+v, consecutiveFailures %d", ready, r.Status.ConsecutiveFailures)
		}
		return nil
	})
}

// TestChartRepoOutageIsNotStalled: a chart repository that cannot be
// reached (connection refused) is an outage, not bad input: the GitRepo
// is Reconciling (retrying), not Stalled, and no Bundle is written.
func TestChartRepoOutageIsNotStalled(t *testing.T) {
	ns := newNamespace(t, "syncretry-outage")
	charts := helmrepo.New(t, helmrepo.Options{})
	charts.Publish(t, helmrepo.Chart(t, "app", "1.0.0"))
	url := charts.URL
	charts.Close()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	repo.Commit("master", map[string]string{"fleet.yaml": "helm:\n  repo: " + url + "\n  chart: app\n"})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: srv.URLFor(repo), PollingInterval: &metav1.Duration{Duration: time.Second}})

	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "app")
		ready, stalled, reconciling := condition(r, fleet.ConditionReady), condition(r, fleet.ConditionStalled), condition(r, fleet.ConditionReconciling)
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != gitops.ReasonBuildFailed || !strings.Contains(ready.Message, "connection refused") {
			return fmt.Errorf("ready %+v", ready)
		}
		if stalled == nil || stalled.Status != metav1.ConditionFalse {
			return fmt.Errorf("an unreachable chart repository is not bad input: stalled %+v", stalled)
		}
		if reconciling == nil || reconciling.Status != metav1.ConditionTrue || !strings.Contains(reconciling.Message, "retrying") {
			return fmt.Errorf("reconciling %+v", reconciling)
		}
		return nil
	})
	if n := len(bundlesOf(t, ns, "app")); n != 0 {
		t.Fatalf("%d bundles written from a failed build", n)
	}
}

// TestAPIServerRejectionIsInputError: a Bundle the API server refuses (a
// rolloutStrategy value its CRD schema does not allow, which the bundle
// reader lets through) is bad input: Stalled, with the bundle named, and
// the previous commit stays applied; the next commit is applied.
func TestAPIServerRejectionIsInputError(t *testing.T) {
	ns := newNamespace(t, "syncretry-rejected")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{
		"apps/bad/fleet.yaml": "defaultNamespace: bad\n",
		"apps/bad/cm.yaml":    configMap("bad", "v1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	createRepo(t, ns, "rej", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"apps/*"},
		PollingInterval: &metav1.Duration{Duration: time.Second}})
	waitSynced(t, ns, "rej", c1, 1)

	repo.Commit("master", map[string]string{
		"apps/bad/fleet.yaml": "defaultNamespace: bad\nrolloutStrategy:\n  maxUnavailable: ten percent\n",
	})
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "rej")
		ready, stalled, reconciling := condition(r, fleet.ConditionReady), condition(r, fleet.ConditionStalled), condition(r, fleet.ConditionReconciling)
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != gitops.ReasonApplyFailed {
			return fmt.Errorf("ready %+v", ready)
		}
		if stalled == nil || stalled.Status != metav1.ConditionTrue || !strings.Contains(stalled.Message, "rej-apps-bad") ||
			!strings.Contains(stalled.Message, "maxUnavailable") {
			return fmt.Errorf("a Bundle the API server rejects is bad input: stalled %+v", stalled)
		}
		if reconciling == nil || reconciling.Status != metav1.ConditionFalse {
			return fmt.Errorf("reconciling %+v", reconciling)
		}
		if r.Status.Commit != c1 {
			return fmt.Errorf("status.commit %s, want %s", r.Status.Commit, c1)
		}
		return nil
	})

	c3 := repo.Commit("master", map[string]string{
		"apps/bad/fleet.yaml": "defaultNamespace: bad\nrolloutStrategy:\n  maxUnavailable: 50%\n",
	})
	waitSynced(t, ns, "rej", c3, 1)
	fleettest.Eventually(t, timeout, func() error {
		if s := condition(getRepo(t, ns, "rej"), fleet.ConditionStalled); s == nil || s.Status != metav1.ConditionFalse {
			return fmt.Errorf("stalled %+v", s)
		}
		return nil
	})
}
