package bundle

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// A Bundle that is gone from the cache while the API server has one of the
// same name is looked at again only when this replica's cache selects the
// live one (as the manager's does: the unsharded replica caches Bundles
// without a shard label, not those labelled with an empty one); otherwise
// the new object never shows up and the name was re-read every few seconds
// for good.
func TestOrphanedLooksAgainOnlyAtOwnShard(t *testing.T) {
	noLabel := map[string]string{"app": "x"}
	emptyLabel := map[string]string{fleet.ShardLabel: ""}
	shardA := map[string]string{fleet.ShardLabel: "a"}
	tests := []struct {
		name  string
		shard string
		live  map[string]string
		again bool
	}{
		{"unsharded, live without label", "", noLabel, true},
		{"unsharded, live with empty label", "", emptyLabel, false},
		{"unsharded, live of shard a", "", shardA, false},
		{"shard a, live of shard a", "a", shardA, true},
		{"shard a, live without label", "a", noLabel, false},
		{"shard a, live with empty label", "a", emptyLabel, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newFakeReconciler()
			r.Opts.ShardID = tc.shard
			live := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app", Labels: tc.live}}
			res, err := r.orphaned(context.Background(), types.NamespacedName{Namespace: "ws", Name: "app"}, live)
			if err != nil {
				t.Fatal(err)
			}
			if again := res.RequeueAfter > 0; again != tc.again {
				t.Errorf("looked at again: %v, want %v", again, tc.again)
			}
		})
	}
}
