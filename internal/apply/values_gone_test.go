package apply_test

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
)

// staleSecretReader reads through to the API server, except that its
// first two reads of the Secret stale (the check before the Bundle is
// created, and the read before the Secret is written) return stale: a
// Secret read just before something else deleted it.
type staleSecretReader struct {
	client.Reader
	stale *corev1.Secret
	reads atomic.Int32
}

func (r *staleSecretReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if sec, ok := obj.(*corev1.Secret); ok && key == client.ObjectKeyFromObject(r.stale) && r.reads.Add(1) <= 2 {
		r.stale.DeepCopyInto(sec)
		return nil
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// A Bundle written again under the name of a deleted one finds that
// bundle's values Secret, which is being removed (by the garbage collector
// or the manager) while it takes it over: the write still stores the
// values, in a new Secret, instead of failing.
func TestValuesSecretDeletedDuringTakeOver(t *testing.T) {
	ctx := context.Background()
	build := func() *fleet.Bundle {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reborn"}}
		b.Spec.Resources = []fleet.BundleResource{{Name: "cm.yaml", Content: "kind: ConfigMap\n"}}
		b.Spec.Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{"password": "s3cret"}}}
		return b
	}
	if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{build()}, apply.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	old := getBundle(t, "reborn")
	stale := must(getSecret("reborn"))
	// The Bundle goes (no manager runs here, so no finalizer holds it),
	// then its Secret.
	if err := up.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := up.Client.Delete(ctx, stale.DeepCopy()); err != nil {
		t.Fatal(err)
	}

	reader := &staleSecretReader{Reader: up.Client, stale: stale}
	if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{build()}, apply.Options{Namespace: ns, Reader: reader}); err != nil {
		t.Fatalf("apply over a values Secret deleted meanwhile: %v", err)
	}
	if reader.reads.Load() < 2 {
		t.Fatal("the stale Secret was not read before writing: the test did not test anything")
	}
	b := getBundle(t, "reborn")
	sec := must(getSecret("reborn"))
	if b.UID == old.UID || apply.HashValues(sec.Data) != b.Spec.ValuesHash || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != b.UID {
		t.Errorf("values Secret %v owned by %+v, want the values of the new Bundle %s", sec.Name, sec.OwnerReferences, b.UID)
	}
}
