package manager

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// The Bundle controller decides whether a live Bundle under a freed name
// is its shard's (bundle.InShard) without the cache's selector, which this
// package owns and which imports the Bundle controller. The two rules must
// agree, or a re-created Bundle of this shard is taken for another's (its
// leftovers never looked at again) or the reverse (looked at forever,
// never showing up in the cache).
func TestBundleInShardAgreesWithShardSelector(t *testing.T) {
	labelSets := map[string]map[string]string{
		"no labels":       nil,
		"other label":     {"app": "x"},
		"empty shard":     {fleet.ShardLabel: ""},
		"shard a":         {fleet.ShardLabel: "a"},
		"shard b":         {fleet.ShardLabel: "b"},
		"shard a + other": {fleet.ShardLabel: "a", "app": "x"},
	}
	for _, id := range []string{"", "a"} {
		for name, lbls := range labelSets {
			t.Run("shard "+id+"/"+name, func(t *testing.T) {
				want := ShardSelector(id).Matches(labels.Set(lbls))
				if got := bundle.InShard(id, lbls); got != want {
					t.Errorf("bundle.InShard(%q, %v) = %v, ShardSelector(%q) matches: %v", id, lbls, got, id, want)
				}
			})
		}
	}
}
