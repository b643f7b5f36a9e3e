package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestRefusedStatusWriteKeepsTheSync: a sync that worked but whose status
// write the API server refused (a policy, an outage) is not repeated before
// the next poll; the retry must still record the commit it applied, not
// leave the GitRepo claiming the old one until the next poll (an hour
// here).
func TestRefusedStatusWriteKeepsTheSync(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "statuslost")
	const label = "test.fleet/refuse-status"
	policy, binding := fleettest.Denial{
		Name: "refuse-gitrepo-status", Operation: admissionv1.Update, Resource: "gitrepos/status",
		Allow:   fmt.Sprintf("!has(object.metadata.labels) || !('%s' in object.metadata.labels)", label),
		Message: "status writes refused for this test",
	}.Objects()
	for _, o := range []client.Object{policy, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	// The API server enforces a policy once its informer has it.
	// (A status write keeps the stored labels, so the probe has its label
	// from the start.)
	probe := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: map[string]string{label: "yes"}},
		Spec:       fleet.GitRepoSpec{Repo: "https://127.0.0.1:1/none", Paused: true},
	}
	if err := env.Client.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		p := &fleet.GitRepo{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(probe), p); err != nil {
			return err
		}
		p.Status.Commit = "probe"
		err := env.Client.Status().Update(ctx, p, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "refused for this test") {
			return fmt.Errorf("policy not in force yet (%v)", err)
		}
		return nil
	})

	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "statuslost")
	commit := repo.Commit("main", map[string]string{"cm.yaml": configMap("lost", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lost", Labels: map[string]string{label: "yes"}},
		Spec: fleet.GitRepoSpec{Repo: srv.URLFor(repo), Branch: "main",
			PollingInterval: &metav1.Duration{Duration: time.Hour}},
	}
	if err := env.Client.Create(ctx, gr); err != nil {
		t.Fatal(err)
	}
	// The sync writes the Bundle; its status write is refused.
	fleettest.Eventually(t, timeout, func() error {
		if n := len(bundlesOf(t, ns, "lost")); n != 1 {
			return fmt.Errorf("%d bundles", n)
		}
		return nil
	})
	if c := getRepo(t, ns, "lost").Status.Commit; c != "" {
		t.Fatalf("status written under the policy: commit %q", c)
	}
	polls := len(srv.RefTimes())

	// The refusal goes; the retry (from the failed reconcile's backoff)
	// writes the status of the sync it did not repeat.
	cur := getRepo(t, ns, "lost")
	delete(cur.Labels, label)
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ns, "lost", commit, 1)
	r := getRepo(t, ns, "lost")
	if r.Status.ObservedGeneration != r.Generation || r.Status.PollingCommit != commit {
		t.Fatalf("status after the retry: observedGeneration %d of %d, pollingCommit %q", r.Status.ObservedGeneration, r.Generation, r.Status.PollingCommit)
	}
	// Nothing was fetched again to get there: one fetch per sync.
	if n := len(srv.RefTimes()); n != polls {
		t.Errorf("%d ref listings after the refusal went, want none (the sync was not repeated)", n-polls)
	}
}
