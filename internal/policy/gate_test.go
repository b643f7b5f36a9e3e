package policy

import (
	"errors"
	"testing"
)

// TestGate: functions wait for the gate to open and run once; an open
// (or nil) gate runs them at once; Open runs every waiting function even
// when one fails, and readers see it open before the first of them runs.
func TestGate(t *testing.T) {
	var nilGate *Gate
	if !nilGate.Served() {
		t.Fatal("a nil gate must be open")
	}
	ran := 0
	if err := nilGate.OnServed(func() error { ran++; return nil }); err != nil || ran != 1 {
		t.Fatalf("nil gate: ran %d, err %v", ran, err)
	}

	g := NewGate(false)
	var order []string
	boom := errors.New("boom")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(g.OnServed(func() error { order = append(order, "a"); return boom }))
	must(g.OnServed(func() error {
		if !g.Served() {
			t.Error("a watch starts while readers still see the gate closed: an event it delivers could be checked without Policies")
		}
		order = append(order, "b")
		return nil
	}))
	if g.Served() || len(order) != 0 {
		t.Fatalf("closed gate: served %v, ran %v", g.Served(), order)
	}
	if err := g.Open(); !errors.Is(err, boom) {
		t.Fatalf("Open() = %v, want the first error", err)
	}
	if !g.Served() || len(order) != 2 {
		t.Fatalf("after Open: served %v, ran %v", g.Served(), order)
	}
	must(g.Open())
	must(g.OnServed(func() error { order = append(order, "c"); return nil }))
	if len(order) != 3 || order[2] != "c" {
		t.Fatalf("open gate must run at once, exactly once each: %v", order)
	}
}
