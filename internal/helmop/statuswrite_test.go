package helmop_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/helmop"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// TestHelmOpStatusFromStaleCopy: a status write computed from a copy of
// the HelmOp older than the previous status write (what a reconcile sees
// when the cache has not caught up with that write) must still leave the
// right status stored, since the watch ignores status-only updates and no
// later event would correct it:
//   - a status equal to the stale copy's is not skipped: failing written,
//     then ready computed against the old ready copy, must store ready;
//   - a status that differs from the stale copy also writes the fields the
//     two share: ready at a new version against the old ready copy must
//     not leave the failure's conditions stored.
func TestHelmOpStatusFromStaleCopy(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "stale")
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "web", "1.0.0"))
	// An exact version and no polling: once ready, the running controller
	// leaves the HelmOp alone, so only this test writes its status.
	if err := env.Client.Create(ctx, helmOp(ns, "web", repo.URL, "web", "")); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error { return readyIs(getOp(t, ns, "web"), metav1.ConditionTrue, "1.0.0") })
	fleettest.Eventually(t, timeout, func() error {
		before := getOp(t, ns, "web").ResourceVersion
		time.Sleep(3 * time.Second)
		if now := getOp(t, ns, "web").ResourceVersion; now != before {
			return fmt.Errorf("HelmOp still changing (%s → %s)", before, now)
		}
		return nil
	})
	ready := getOp(t, ns, "web")
	failed := errors.New("chart repository unreachable")
	// Reads and writes go to the API server; the stale copy is the cache.
	r := &helmop.Reconciler{Client: env.Client, APIReader: env.Client}

	if err := r.WriteStatus(ctx, ready.DeepCopy(), "1.0.0", failed); err != nil {
		t.Fatal(err)
	}
	if err := readyIs(getOp(t, ns, "web"), metav1.ConditionFalse, "1.0.0"); err != nil {
		t.Fatalf("after the failure: %v", err)
	}
	if err := r.WriteStatus(ctx, ready.DeepCopy(), "1.0.0", nil); err != nil {
		t.Fatal(err)
	}
	if err := readyIs(getOp(t, ns, "web"), metav1.ConditionTrue, "1.0.0"); err != nil {
		t.Fatalf("after the recovery computed against the stale copy: %v", err)
	}

	if err := r.WriteStatus(ctx, getOp(t, ns, "web"), "1.0.0", failed); err != nil {
		t.Fatal(err)
	}
	if err := readyIs(getOp(t, ns, "web"), metav1.ConditionFalse, "1.0.0"); err != nil {
		t.Fatalf("after the second failure: %v", err)
	}
	if err := r.WriteStatus(ctx, ready.DeepCopy(), "1.0.1", nil); err != nil {
		t.Fatal(err)
	}
	if err := readyIs(getOp(t, ns, "web"), metav1.ConditionTrue, "1.0.1"); err != nil {
		t.Fatalf("after the recovery at a new version computed against the stale copy: %v", err)
	}
}

// readyIs checks op's Ready condition, its display state and its version.
func readyIs(op *fleet.HelmOp, want metav1.ConditionStatus, version string) error {
	c := condition(op, fleet.ConditionReady)
	if c == nil || c.Status != want {
		return fmt.Errorf("ready = %+v, want %s", c, want)
	}
	if op.Status.Display.Error != (want == metav1.ConditionFalse) {
		return fmt.Errorf("display %+v with ready %s", op.Status.Display, want)
	}
	if op.Status.Version != version {
		return fmt.Errorf("version %q, want %q", op.Status.Version, version)
	}
	return nil
}
