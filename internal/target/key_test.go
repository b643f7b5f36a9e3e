package target

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func keyTarget(ns, name string) *Target {
	return &Target{Cluster: &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
}

// TestKeyLessOrdersLikeKey: KeyLess sorts exactly as comparing Key strings
// does, including namespaces that are prefixes of each other and bytes on
// both sides of '/' ('-' and '.' sort before it, digits and letters after).
func TestKeyLessOrdersLikeKey(t *testing.T) {
	cases := [][2]*Target{
		{keyTarget("a", "x"), keyTarget("a-b", "x")},
		{keyTarget("a", "x"), keyTarget("a0", "x")},
		{keyTarget("a", "x"), keyTarget("a.b", "a")},
		{keyTarget("ab", "z"), keyTarget("a", "zz")},
		{keyTarget("fleet-default", "c1"), keyTarget("fleet-default", "c10")},
		{keyTarget("ws", "b"), keyTarget("ws", "b")},
	}
	for _, c := range cases {
		a, b := c[0], c[1]
		if got, want := KeyLess(a, b), a.Key() < b.Key(); got != want {
			t.Errorf("KeyLess(%s, %s) = %v, want %v", a.Key(), b.Key(), got, want)
		}
		if got, want := KeyLess(b, a), b.Key() < a.Key(); got != want {
			t.Errorf("KeyLess(%s, %s) = %v, want %v", b.Key(), a.Key(), got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := "-.0a" // around '/', which names never contain
	word := func() string {
		b := make([]byte, 1+r.IntN(4))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 20000 {
		a, b := keyTarget(word(), word()), keyTarget(word(), word())
		if got, want := KeyLess(a, b), a.Key() < b.Key(); got != want {
			t.Fatalf("KeyLess(%s, %s) = %v, want %v", a.Key(), b.Key(), got, want)
		}
	}
}

// BenchmarkSortTargets: sorting 10,000 targets as Compute does, by building
// the keys and with KeyLess.
func BenchmarkSortTargets(b *testing.B) {
	base := make([]*Target, 10000)
	for i := range base {
		base[i] = keyTarget(fmt.Sprintf("cluster-fleet-default-cluster-%012x-%012x", rand.Uint64()>>16, rand.Uint64()>>16), "c")
	}
	run := func(b *testing.B, less func(x, y *Target) bool) {
		ts := make([]*Target, len(base))
		b.ReportAllocs()
		for b.Loop() {
			copy(ts, base)
			sort.Slice(ts, func(i, j int) bool { return less(ts[i], ts[j]) })
		}
	}
	b.Run("Key", func(b *testing.B) { run(b, func(x, y *Target) bool { return x.Key() < y.Key() }) })
	b.Run("KeyLess", func(b *testing.B) { run(b, KeyLess) })
}
