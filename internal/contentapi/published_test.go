package contentapi

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestPublished(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewPublished()
	p.now = func() time.Time { return now }
	bd := types.NamespacedName{Namespace: "cluster-a", Name: "app"}
	other := types.NamespacedName{Namespace: "cluster-b", Name: "app"}

	p.Record(bd, []string{"s-new", "s-staged"})
	cases := []struct {
		key     types.NamespacedName
		content string
		want    bool
	}{
		{bd, "s-new", true},
		{bd, "s-staged", true},
		{bd, "s-other", false},
		{other, "s-new", false}, // another cluster's namespace learns nothing
	}
	for _, tc := range cases {
		if got := p.References(tc.key, tc.content); got != tc.want {
			t.Errorf("References(%v, %s) = %v, want %v", tc.key, tc.content, got, tc.want)
		}
	}

	// A later write replaces the earlier one.
	p.Record(bd, []string{"s-next"})
	if p.References(bd, "s-new") || !p.References(bd, "s-next") {
		t.Error("a rewrite did not replace the recorded Contents")
	}
	// Forgotten on delete.
	p.Forget(bd)
	if p.References(bd, "s-next") {
		t.Error("a deleted deployment still references its Content")
	}
	// Expired after PublishedMemory.
	p.Record(bd, []string{"s-next"})
	now = now.Add(PublishedMemory)
	if p.References(bd, "s-next") {
		t.Error("a write older than PublishedMemory is still trusted")
	}
	// Swept: the map does not grow with every deployment ever written.
	for i := range sweepEvery {
		p.Record(types.NamespacedName{Namespace: fmt.Sprint("ns-", i), Name: "x"}, nil)
	}
	if _, ok := p.entries[bd]; ok {
		t.Error("an expired entry survived a sweep")
	}

	var none *Published
	none.Record(bd, []string{"s"})
	none.Forget(bd)
	if none.References(bd, "s") {
		t.Error("a nil Published remembered something")
	}
}
