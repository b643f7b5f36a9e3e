package statuswrite

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestSkipEqual(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	other := types.NamespacedName{Namespace: "ns", Name: "b"}
	for _, tc := range []struct {
		name  string
		setup func(v *Versions)
		rv    string
		fresh bool
		want  bool
	}{
		{name: "nothing recorded", setup: func(*Versions) {}, rv: "5", want: true},
		{name: "cache shows the last write", setup: func(v *Versions) { v.Wrote(key, "5") }, rv: "5", want: true},
		{name: "cache behind the last write", setup: func(v *Versions) { v.Wrote(key, "7") }, rv: "5", want: false},
		{name: "fresh read", setup: func(v *Versions) { v.Wrote(key, "7") }, rv: "9", fresh: true, want: true},
		{name: "another object written", setup: func(v *Versions) { v.Wrote(other, "7") }, rv: "5", want: true},
		{name: "forgotten", setup: func(v *Versions) { v.Wrote(key, "7"); v.Forget(key) }, rv: "5", want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &Versions{}
			tc.setup(v)
			if got := v.SkipEqual(key, tc.rv, tc.fresh); got != tc.want {
				t.Fatalf("SkipEqual(%s, fresh=%v) = %v, want %v", tc.rv, tc.fresh, got, tc.want)
			}
		})
	}
}

// TestSkipEqualRecords: a skip records the version it accepted, so the
// next copy at that version is trusted and an older one is not.
func TestSkipEqualRecords(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	v := &Versions{}
	v.Wrote(key, "7")
	if !v.SkipEqual(key, "9", true) {
		t.Fatal("fresh copy not accepted")
	}
	if !v.SkipEqual(key, "9", false) {
		t.Fatal("cached copy at the recorded version not trusted")
	}
	if v.SkipEqual(key, "7", false) {
		t.Fatal("cached copy older than the recorded version trusted")
	}
}
