package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

func fetches(p *countingProxy) int {
	n := 0
	for _, r := range p.Requests() {
		if strings.Contains(r, "upload-pack") && strings.HasPrefix(r, "POST") {
			n++
		}
	}
	return n
}

// TestPolicyDefaultChangeKeepsBackoff: a Policy default changed while the
// current commit cannot be built is retried once at once, then on the
// backoff schedule: Bundle events (status churn from many clusters) do not
// each cause a fetch.
func TestPolicyDefaultChangeKeepsBackoff(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "scratch-grant")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	proxy := newCountingProxy(t, srv.URL)
	policy := &fleet.Policy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, GitRepo: &fleet.GitRepoPolicy{DefaultServiceAccount: "tenant"}}
	createPolicy(t, policy)
	createRepo(t, ns, "app", fleet.GitRepoSpec{Repo: proxy.URLFor(repo), PollingInterval: &metav1.Duration{Duration: time.Hour}})
	waitSynced(t, ns, "app", c1, 1)
	repo.Commit("master", map[string]string{"fleet.yaml": "helm: [}\n"})
	// Polling is hourly: a spec change makes it fetch the broken commit.
	gr := getRepo(t, ns, "app")
	gr.Spec.ForceSyncGeneration = 1
	if err := env.Client.Update(ctx, gr); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		c := condition(getRepo(t, ns, "app"), fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("ready %+v", c)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	touch := func(n int) int {
		before := fetches(proxy)
		for i := 0; i < n; i++ {
			for _, b := range bundlesOf(t, ns, "app") {
				if b.Labels == nil {
					b.Labels = map[string]string{}
				}
				b.Labels["touch"] = fmt.Sprint(time.Now().UnixNano())
				if err := env.Client.Update(ctx, &b); err != nil {
					t.Log(err)
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
		time.Sleep(time.Second)
		return fetches(proxy) - before
	}
	if n := touch(5); n != 0 {
		t.Fatalf("5 Bundle updates, Policy unchanged: %d fetches, want 0", n)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
		t.Fatal(err)
	}
	before := fetches(proxy)
	policy.GitRepo.DefaultServiceAccount = "tenant-2"
	if err := env.Client.Update(ctx, policy); err != nil {
		t.Fatal(err)
	}
	// The new default is tried once at once (its sync fails: the commit
	// is broken) ...
	fleettest.Eventually(t, timeout, func() error {
		if fetches(proxy) == before {
			return fmt.Errorf("the new default was not tried")
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	// ... and then waits for its backoff, whatever happens to its Bundles.
	if n := touch(5); n != 0 {
		t.Fatalf("5 Bundle updates after the Policy default changed: %d fetches, want 0 (backoff skipped)", n)
	}
}
