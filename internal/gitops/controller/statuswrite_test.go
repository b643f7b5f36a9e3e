package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/gitops/poll"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// reasons records the reasons of the events it is given.
type reasons struct {
	mu  sync.Mutex
	got []string
}

func (r *reasons) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, _ string, _ ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, reason)
}

func (r *reasons) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// TestStaleStatusWriteRecordsTransitionOnce: a status write computed from a
// stale copy of the GitRepo (what a reconcile sees when the cache has not yet
// caught up with the previous write) must not record the Recovered
// transition a second time: the optimistic lock makes it conflict, and the
// write is recomputed from the stored GitRepo.
func TestStaleStatusWriteRecordsTransitionOnce(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "stale")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "stale")
	c := repo.Commit("main", map[string]string{"cm.yaml": configMap("s", "0")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	// Without polling the running controller leaves a synced GitRepo alone,
	// so only this test writes its status from here on.
	createRepo(t, ns, "quiet", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Branch: "main", DisablePolling: true})
	waitSynced(t, ns, "quiet", c, 1)
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "quiet")
		if rc := condition(r, fleet.ConditionReconciling); rc == nil || rc.Status != metav1.ConditionFalse {
			return fmt.Errorf("reconciling %+v", rc)
		}
		return nil
	})
	fleettest.Eventually(t, timeout, func() error {
		before := getRepo(t, ns, "quiet").ResourceVersion
		time.Sleep(3 * time.Second)
		if now := getRepo(t, ns, "quiet").ResourceVersion; now != before {
			return fmt.Errorf("GitRepo still changing (%s → %s)", before, now)
		}
		return nil
	})

	rec := &reasons{}
	r := &gitops.Reconciler{Client: env.Client, APIReader: env.Client, Recorder: rec, Opts: gitops.Options{Tracker: poll.NewTracker()}}
	if err := r.WriteStatus(ctx, getRepo(t, ns, "quiet"), errors.New("broken fleet.yaml")); err != nil {
		t.Fatal(err)
	}
	failing := getRepo(t, ns, "quiet")
	if rc := condition(failing, fleet.ConditionReady); rc == nil || rc.Reason != gitops.ReasonBuildFailed {
		t.Fatalf("ready after the failure: %+v", rc)
	}
	if err := r.WriteStatus(ctx, failing.DeepCopy(), nil); err != nil {
		t.Fatal(err)
	}
	// The same, stale, copy again: it still says "failing".
	if err := r.WriteStatus(ctx, failing.DeepCopy(), nil); err != nil {
		t.Fatal(err)
	}
	if rc := condition(getRepo(t, ns, "quiet"), fleet.ConditionReady); rc == nil || rc.Status != metav1.ConditionTrue {
		t.Fatalf("ready after the recovery: %+v", rc)
	}
	if got := rec.list(); len(got) != 2 || got[0] != gitops.ReasonBuildFailed || got[1] != "Recovered" {
		t.Fatalf("events %v, want [BuildFailed Recovered]", got)
	}
}
