package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// startManager runs a manager of its own on cluster, as
// fleettest.StartControllers makes, with the Bundle and GitRepo
// controllers (whose names may be the shared manager's), and returns what
// stops it. A test stops and starts it to play a manager restart.
func startManager(t *testing.T, cluster *testenv.Cluster) (stop func()) {
	t.Helper()
	ctx := context.Background()
	mgr, err := ctrl.NewManager(cluster.Config, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	if err := bundle.Setup(mctx, mgr, bundle.Options{Workers: 2, Coalesce: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := gitops.Setup(mctx, mgr, gitops.Options{Workers: 2, GitTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	return func() { cancel(); <-done }
}

// TestHandDeletedBundleAfterRestart: a manager started after the GitRepo
// was synced (by a previous one) still brings back a Bundle deleted by
// hand, though it never built the commit itself. It runs on a cluster of
// its own, since the package's shared manager cannot be restarted.
func TestHandDeletedBundleAfterRestart(t *testing.T) {
	ctx := context.Background()
	cluster, err := testenv.Start(testenv.Options{Name: "gitops-restart"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	c := cluster.Client
	start := func() func() { return startManager(t, cluster) }
	bundles := func() map[string]fleet.Bundle {
		t.Helper()
		var list fleet.BundleList
		if err := c.List(ctx, &list, client.InNamespace("restart"), client.MatchingLabels{fleet.RepoLabel: "web"}); err != nil {
			t.Fatal(err)
		}
		out := map[string]fleet.Bundle{}
		for _, b := range list.Items {
			out[b.Name] = b
		}
		return out
	}

	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restart"}}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "apps")
	c1 := repo.Commit("master", map[string]string{
		"apps/one/cm.yaml": configMap("one", "v1"),
		"apps/two/cm.yaml": configMap("two", "v1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	stop := start()
	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: "restart", Name: "web"},
		Spec: fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"apps/*"},
			PollingInterval: &metav1.Duration{Duration: time.Hour}},
	}
	if err := c.Create(ctx, gr); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		r := &fleet.GitRepo{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gr), r); err != nil {
			return err
		}
		if r.Status.Commit != c1 || len(bundles()) != 2 {
			return fmt.Errorf("commit %q, %d bundles", r.Status.Commit, len(bundles()))
		}
		return nil
	})
	stop()

	// The new manager polls once when it starts (the next poll is an hour
	// away); the deletion comes after that.
	polls := len(srv.RefTimes())
	stop = start()
	t.Cleanup(stop)
	fleettest.Eventually(t, timeout, func() error {
		if n := len(srv.RefTimes()); n == polls {
			return fmt.Errorf("the new manager has not polled yet")
		}
		return nil
	})
	old := bundles()["web-apps-one"]
	if err := c.Delete(ctx, &old); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		b, ok := bundles()["web-apps-one"]
		if !ok || b.UID == old.UID || b.DeletionTimestamp != nil {
			return fmt.Errorf("bundle web-apps-one not recreated (present %v)", ok)
		}
		if b.Labels[fleet.CommitLabel] != c1 {
			return fmt.Errorf("recreated from commit %q, want %q", b.Labels[fleet.CommitLabel], c1)
		}
		return nil
	})
}
