package since

import (
	"testing"
	"time"
)

func TestTracker(t *testing.T) {
	var tr Tracker[string]
	t0 := time.Unix(1000, 0)
	steps := []struct {
		name  string
		clear bool
		key   string
		at    time.Time
		want  time.Time
	}{
		{name: "first observation", key: "a", at: t0, want: t0},
		{name: "still holds: since the first", key: "a", at: t0.Add(5 * time.Second), want: t0},
		{name: "other keys are independent", key: "b", at: t0.Add(6 * time.Second), want: t0.Add(6 * time.Second)},
		{name: "cleared", clear: true, key: "a"},
		{name: "holds again: counts anew", key: "a", at: t0.Add(9 * time.Second), want: t0.Add(9 * time.Second)},
		{name: "clearing an unknown key is harmless", clear: true, key: "zz"},
		{name: "b unaffected", key: "b", at: t0.Add(20 * time.Second), want: t0.Add(6 * time.Second)},
	}
	for _, s := range steps {
		if s.clear {
			tr.Clear(s.key)
			continue
		}
		if got := tr.Mark(s.key, s.at); !got.Equal(s.want) {
			t.Errorf("%s: Mark(%s) = %v, want %v", s.name, s.key, got, s.want)
		}
	}
}
