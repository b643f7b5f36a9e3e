package bundle

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	fleetscheme "github.com/fleetgo/fleet/internal/scheme"
)

// newFakeReconciler is a Reconciler on a fake client with empty informer
// stores: enough for the paths that only forget what is gone.
func newFakeReconciler() *Reconciler {
	c := fake.NewClientBuilder().WithScheme(fleetscheme.Scheme).WithStatusSubresource(&fleet.Bundle{}).Build()
	bds := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{bdByBundle: func(any) ([]string, error) { return nil, nil }})
	clusters := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	opts := Options{}
	opts.defaults()
	return &Reconciler{Client: c, APIReader: c, Opts: opts, objs: &CachedObjects{bds: bds, clusters: clusters},
		largePasses: make(chan struct{}, maxLargePasses)}
}

func syncMapLen(m interface{ Range(func(k, v any) bool) }) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// TestReconcileGoneForgetsBundle: once a Bundle is gone (deleted, or moved
// to another shard), its reconcile leaves no entry of it in the
// reconciler's per-bundle and per-deployment maps; another Bundle's entries
// stay. Each left-behind entry lived as long as the process.
func TestReconcileGoneForgetsBundle(t *testing.T) {
	r := newFakeReconciler()
	gone := types.NamespacedName{Namespace: "ws", Name: "gone"}
	other := types.NamespacedName{Namespace: "ws", Name: "other"}
	for _, k := range []types.NamespacedName{gone, other} {
		r.statusWritten.Store(k, time.Now())
		r.statusUnsure.Store(k, true)
		r.values.Store(k, &valuesEntry{})
		r.invalidReported.Store(k, "msg")
	}
	r.written.Store(types.NamespacedName{Namespace: "cluster-a", Name: "gone"}, writtenAt{Bundle: "ws/gone", Created: true, At: time.Now()})
	r.written.Store(types.NamespacedName{Namespace: "cluster-b", Name: "gone"}, writtenAt{Bundle: "ws/gone", At: time.Now()})
	r.written.Store(types.NamespacedName{Namespace: "cluster-a", Name: "other"}, writtenAt{Bundle: "ws/other", At: time.Now()})

	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: gone}); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]interface {
		Load(any) (any, bool)
	}{"statusWritten": &r.statusWritten, "statusUnsure": &r.statusUnsure, "values": &r.values, "invalidReported": &r.invalidReported} {
		if _, ok := m.Load(gone); ok {
			t.Errorf("%s still holds the gone Bundle", name)
		}
		if _, ok := m.Load(other); !ok {
			t.Errorf("%s lost another Bundle's entry", name)
		}
	}
	r.written.Range(func(k, v any) bool {
		if v.(writtenAt).Bundle == "ws/gone" {
			t.Errorf("written still holds %v of the gone Bundle", k)
		}
		return true
	})
	if n := syncMapLen(&r.written); n != 1 {
		t.Errorf("written has %d entries, want another Bundle's one", n)
	}
}

// TestPatchStatusGoneRemembersNothing: a status patch that finds the Bundle
// gone wrote nothing, so no write time is kept for it (nothing would drop
// it again if no NotFound reconcile followed).
func TestPatchStatusGoneRemembersNothing(t *testing.T) {
	r := newFakeReconciler()
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "gone", ResourceVersion: "1"}}
	b.Status.ObservedGeneration = 2
	if _, err := r.patchStatus(context.Background(), b, &fleet.BundleStatus{}); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "ws", Name: "gone"}
	if _, ok := r.statusWritten.Load(key); ok {
		t.Error("statusWritten holds a Bundle whose status patch found it gone")
	}
	if _, ok := r.statusUnsure.Load(key); ok {
		t.Error("statusUnsure holds a Bundle whose status patch found it gone")
	}
}
