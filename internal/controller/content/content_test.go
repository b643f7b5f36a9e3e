package content

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/fleetgo/fleet/internal/controller/bundle"
)

func TestDesiredRules(t *testing.T) {
	cases := []struct {
		name     string
		contents []string
		want     string
	}{
		{"none gives no rule (empty resourceNames would allow all)", nil, "[]"},
		{"sorted and deduplicated", []string{"s-b", "s-a", "s-b"}, "[get] [contents] [s-a s-b]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rules := DesiredRules(c.contents)
			got := "[]"
			if len(rules) == 1 {
				got = fmt.Sprintf("%v %v %v", rules[0].Verbs, rules[0].Resources, rules[0].ResourceNames)
			}
			if len(rules) > 1 || got != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
	if !rulesEqual(DesiredRules([]string{"x"}), DesiredRules([]string{"x", "x"})) || rulesEqual(DesiredRules([]string{"x"}), nil) {
		t.Fatal("rulesEqual")
	}
}

func TestPlanRole(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	grace := 30 * time.Second
	fresh, old := now.Add(-time.Second), now.Add(-time.Minute)
	cases := []struct {
		name                string
		referenced, granted []string
		grants              map[string]time.Time
		names               string
		missing, stale      bool
		keptGrants          string
		expires             bool
	}{
		{name: "in sync: nothing to do", referenced: []string{"a"}, granted: []string{"a"},
			names: "[a]", keptGrants: "[]"},
		{name: "referenced but not granted: write now", referenced: []string{"a", "b"}, granted: []string{"a"},
			names: "[a b]", missing: true, keptGrants: "[]"},
		{name: "fresh grant ahead of its deployment is kept", referenced: []string{"old"}, granted: []string{"new", "old"},
			grants: map[string]time.Time{"new": fresh}, names: "[new old]", keptGrants: "[new]", expires: true},
		{name: "previous content after a rollout is stale", referenced: []string{"new"}, granted: []string{"new", "old"},
			grants: map[string]time.Time{"new": fresh}, names: "[new]", stale: true, keptGrants: "[]"},
		{name: "expired grant never referenced is stale", referenced: nil, granted: []string{"x"},
			grants: map[string]time.Time{"x": old}, names: "[]", stale: true, keptGrants: "[]"},
		{name: "removed target: everything stale", referenced: nil, granted: []string{"a", "b"},
			names: "[]", stale: true, keptGrants: "[]"},
		{name: "a grant the role no longer lists is not re-added", referenced: nil, granted: nil,
			grants: map[string]time.Time{"x": fresh}, names: "[]", keptGrants: "[]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := planRole(c.referenced, c.granted, c.grants, now, grace)
			kept := slices.Sorted(maps.Keys(p.Grants))
			if fmt.Sprint(p.Names) != c.names || p.Missing != c.missing || p.Stale != c.stale ||
				fmt.Sprint(kept) != c.keptGrants || p.Expiry.IsZero() == c.expires {
				t.Fatalf("got names %v missing %v stale %v grants %v expiry %v", p.Names, p.Missing, p.Stale, kept, p.Expiry)
			}
			if c.expires && !p.Expiry.Equal(fresh.Add(grace)) {
				t.Fatalf("expiry %v, want %v", p.Expiry, fresh.Add(grace))
			}
		})
	}
}

func TestGrantsAnnotationRoundTrip(t *testing.T) {
	role := &rbacv1.ClusterRole{}
	at := time.Unix(1_700_000_000, 0)
	bundle.SetGrants(role, map[string]time.Time{"s-b": at, "s-a": at.Add(time.Second)})
	if got := role.Annotations[bundle.GrantsAnnotation]; got != `{"s-a":1700000001,"s-b":1700000000}` {
		t.Fatalf("annotation %s", got)
	}
	g := bundle.Grants(role)
	if len(g) != 2 || !g["s-b"].Equal(at) {
		t.Fatalf("parsed %v", g)
	}
	bundle.SetGrants(role, nil)
	if _, ok := role.Annotations[bundle.GrantsAnnotation]; ok {
		t.Fatal("empty grants must remove the annotation")
	}
	role.Annotations = map[string]string{bundle.GrantsAnnotation: "not json"}
	if bundle.Grants(role) != nil {
		t.Fatal("malformed annotation must count as no grants")
	}
}

func TestCountDue(t *testing.T) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	const interval = 10 * time.Second
	recent := countOf{refs: 5, at: now.Add(-3 * time.Second)}
	old := countOf{refs: 5, at: now.Add(-11 * time.Second)}
	zero := countOf{refs: 0, at: now.Add(-time.Second)}
	for _, tc := range []struct {
		name      string
		last      countOf
		written   bool
		refs      int
		write     bool
		wantAfter time.Duration
	}{
		{name: "never written: write (after reading the stored count)", written: false, refs: 5, write: true},
		{name: "unchanged: nothing", last: recent, written: true, refs: 5, write: false},
		{name: "moves above zero, last write recent: wait the rest", last: recent, written: true, refs: 7, write: false, wantAfter: 7 * time.Second},
		{name: "moves above zero, last write old: write", last: old, written: true, refs: 7, write: true},
		{name: "drops to zero: write at once", last: recent, written: true, refs: 0, write: true},
		{name: "leaves zero: write at once", last: zero, written: true, refs: 1, write: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write, wait := countDue(tc.last, tc.written, tc.refs, interval, now)
			if write != tc.write || wait != tc.wantAfter {
				t.Errorf("countDue = (%v, %v), want (%v, %v)", write, wait, tc.write, tc.wantAfter)
			}
		})
	}
}
