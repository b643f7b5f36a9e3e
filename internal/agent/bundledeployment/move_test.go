package bundledeployment_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/agent/deployer"
)

// movedBundle is an app under helm.releaseName "moved" in ns: a ConfigMap
// whose data says which bundle deployed it.
func movedBundle(name, ns string) bundle {
	return bundle{
		name:  name,
		files: map[string]string{"cm.yaml": cmFile("moved-app", name)},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{ReleaseName: "moved"}},
	}
}

// appUID is the UID of the moved app's ConfigMap in ns.
func appUID(t *testing.T, ns string) types.UID {
	t.Helper()
	cm, err := configMap(t, ns, "moved-app")
	must(t, err)
	return cm.UID
}

// wantMoved checks that the app moved to bundle to without being removed:
// its ConfigMap kept uid (never deleted and re-created) and holds to's
// data, the release's latest revision records to, and that stays so for a
// few seconds and a garbage collection pass.
func wantMoved(t *testing.T, ns, to string, uid types.UID) {
	t.Helper()
	check := func() {
		t.Helper()
		cm, err := configMap(t, ns, "moved-app")
		if err != nil {
			t.Fatalf("app ConfigMap: %v", err)
		}
		if cm.UID != uid || cm.Data["k"] != to {
			t.Fatalf("app ConfigMap uid %s, k=%s; want uid %s (never deleted) and k=%s", cm.UID, cm.Data["k"], uid, to)
		}
		hist := releaseHistory(t, ns, "moved")
		if len(hist) == 0 {
			t.Fatal("release moved is gone")
		}
		last := hist[len(hist)-1]
		if got := last.Chart.Metadata.Annotations[fleet.BundleIDAnnotation]; got != to || last.Labels[deployer.StorageBundleIDLabel] != to {
			t.Fatalf("latest revision %d records %q (label %q), want %s", last.Version, got, last.Labels[deployer.StorageBundleIDLabel], to)
		}
	}
	check()
	must(t, bundledeployment.Collect(context.Background()))
	time.Sleep(3 * time.Second)
	check()
}

// Moving an app between bundles, the new BundleDeployment created while
// the old one is live: the new one is refused (two live bundles cannot
// share a release) and the old one's release is intact. Deleting the old
// one then hands the release over: its clean-up leaves the release the
// new one claims, the refused deploy is retried at once (not after its
// grown backoff) and upgrades the release, so the app's objects are never
// deleted.
func TestMoveReleaseNewBundleFirst(t *testing.T) {
	const ns = "move-first-ns"
	a, b := movedBundle("move-first-a", ns), movedBundle("move-first-b", ns)
	waitState(t, a.name, put(t, a), fleet.Ready)
	uid := appUID(t, ns)

	idB := put(t, b)
	waitDeployError(t, b.name, "release moved in namespace "+ns+" belongs to BundleDeployment move-first-a")
	wantData(t, ns, "moved-app", "k", a.name)
	// Let the refused deploy's backoff grow (5 s, 10 s, then 20 s), so
	// that only a prompt retry makes b Ready within the bound below.
	eventually(t, "b refused three times", func() error {
		if n := bundledeployment.FailedAttempts(clusterNS, b.name); n < 3 {
			return fmt.Errorf("%d failed attempts", n)
		}
		return nil
	})
	if appUID(t, ns) != uid {
		t.Fatal("the refused bundle replaced the app's ConfigMap")
	}

	deleteBD(t, a.name)
	start := time.Now()
	waitState(t, b.name, idB, fleet.Ready)
	if took := time.Since(start); took > 12*time.Second {
		t.Fatalf("b became Ready %s after a was deleted: its refused deploy waited for its backoff", took)
	}
	wantMoved(t, ns, b.name, uid)
}

// Moving an app between bundles, the old BundleDeployment being deleted
// (a finalizer holds it) before the new one is created: the new one takes
// the release over at once, and the old one's clean-up, once it is gone,
// finds no release of its own.
func TestMoveReleaseOldBundleDeletedFirst(t *testing.T) {
	const ns = "move-deleted-ns"
	const hold = "test.fleet.cattle.io/hold"
	a, b := movedBundle("move-deleted-a", ns), movedBundle("move-deleted-b", ns)
	waitState(t, a.name, put(t, a), fleet.Ready)
	uid := appUID(t, ns)

	setFinalizer := func(add bool) {
		t.Helper()
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			bd := getBD(t, a.name)
			if add {
				controllerutil.AddFinalizer(bd, hold)
			} else {
				controllerutil.RemoveFinalizer(bd, hold)
			}
			return up.Client.Update(context.Background(), bd)
		}))
	}
	setFinalizer(true)
	deleteBD(t, a.name)
	if getBD(t, a.name).DeletionTimestamp == nil {
		t.Fatal("a is not being deleted")
	}

	idB := put(t, b)
	waitState(t, b.name, idB, fleet.Ready)
	wantData(t, ns, "moved-app", "k", b.name)

	setFinalizer(false)
	eventually(t, "a gone and cleaned up", func() error {
		if n := bundledeployment.WatchedObjects(clusterNS, a.name); n != 0 {
			return fmt.Errorf("%d objects of a still watched", n)
		}
		return nil
	})
	wantMoved(t, ns, b.name, uid)
	waitState(t, b.name, idB, fleet.Ready)
}
