package bundledeployment_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Moving an app whose bundle copies downstreamResources into its namespace.
// While the old bundle lives, the new one is refused before anything is
// written: not even a copy it alone lists appears. Once the old one is
// deleted, the new one takes the release over and the copy both list
// becomes its own in place (same UID: the app never loses it), and the one
// it alone lists is made.
func TestMoveReleaseWithDownstreamCopies(t *testing.T) {
	const ns = "move-copy-ns"
	ctx := context.Background()
	createObjects(t, up.Client,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "move-cfg", Namespace: clusterNS}, Data: map[string]string{"v": "1"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "move-cfg-b", Namespace: clusterNS}, Data: map[string]string{"v": "b"}})
	a, b := movedBundle("move-copy-a", ns), movedBundle("move-copy-b", ns)
	a.opts.DownstreamResources = []fleet.DownstreamResource{{Kind: "ConfigMap", Name: "move-cfg"}}
	// b's own copy first: a check made after the copies would have made it.
	b.opts.DownstreamResources = []fleet.DownstreamResource{{Kind: "ConfigMap", Name: "move-cfg-b"}, {Kind: "ConfigMap", Name: "move-cfg"}}
	waitState(t, a.name, put(t, a), fleet.Ready)
	uid := appUID(t, ns)
	copyOf := func(name string) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{}
		must(t, down.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm))
		return cm
	}
	shared := copyOf("move-cfg")

	idB := put(t, b)
	waitDeployError(t, b.name, "belongs to BundleDeployment move-copy-a")
	err := down.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "move-cfg-b"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the refused bundle's copy move-cfg-b: err = %v, want NotFound", err)
	}

	deleteBD(t, a.name)
	waitState(t, b.name, idB, fleet.Ready)
	wantMoved(t, ns, b.name, uid)
	got := copyOf("move-cfg")
	if got.UID != shared.UID || got.Labels[fleet.BundleDeploymentLabel] != b.name {
		t.Fatalf("copy move-cfg: uid %s, label %q; want uid %s (kept) and label %s", got.UID, got.Labels[fleet.BundleDeploymentLabel], shared.UID, b.name)
	}
	if own := copyOf("move-cfg-b"); own.Labels[fleet.BundleDeploymentLabel] != b.name {
		t.Fatalf("copy move-cfg-b labelled %q, want %s", own.Labels[fleet.BundleDeploymentLabel], b.name)
	}
}
