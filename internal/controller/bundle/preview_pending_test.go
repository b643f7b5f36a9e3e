package bundle_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// TestPreviewPendingCluster: `fleet target` (PreviewBundle) lists a
// Cluster registration has not processed yet as pending, not failed, as
// the Bundle's status leaves it out; a registered cluster is planned.
func TestPreviewPendingCluster(t *testing.T) {
	ctx := context.Background()
	ws := "ws-previewpending"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "a", nil, time.Second)
	must(t, env.Client.Create(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "fresh"}}))
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "preview"}}
	b.Spec.Resources = resources("a: b\n")
	b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}}
	p, err := bundle.PreviewBundle(ctx, env.Client, b)
	must(t, err)
	if len(p.Failed) != 0 || len(p.Pending) != 1 || p.Pending[0].Cluster.Name != "fresh" || len(p.Plans) != 1 {
		t.Fatalf("failed %d, pending %d, plans %d; want cluster fresh pending and a planned", len(p.Failed), len(p.Pending), len(p.Plans))
	}
}
