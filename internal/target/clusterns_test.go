package target

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/names"
)

// TestClusterNamespaceMemo: the memoized name is the manager's own for
// every cluster, also for workspaces and names that join to the same
// string and for names long enough to be cut, so the status.namespace
// check is as strict as before; a cluster seen before costs no
// allocation; and the memo never holds more than its bound.
func TestClusterNamespaceMemo(t *testing.T) {
	keys := [][2]string{
		{"ws", "a"}, {"other", "a"}, {"ws-a", "b"}, {"ws", "a-b"}, {"ws", "a::b"}, {"ws::a", "b"},
		{"fleet-default", strings.Repeat("x", 63)}, {strings.Repeat("w", 63), "c"},
	}
	for round := range 2 {
		for _, k := range keys {
			if got, want := ClusterNamespace(k[0], k[1]), names.ClusterNamespace(k[0], k[1]); got != want {
				t.Errorf("round %d: ClusterNamespace(%q, %q) = %q, want %q", round, k[0], k[1], got, want)
			}
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { ClusterNamespace("ws", "a") }); allocs != 0 {
		t.Errorf("a known cluster's namespace costs %v allocations, want 0", allocs)
	}
	for i := range maxNamespaceMemo + 10 {
		ClusterNamespace("churn", fmt.Sprint(i))
	}
	namespaceMemo.RLock()
	n := len(namespaceMemo.m)
	namespaceMemo.RUnlock()
	if n > maxNamespaceMemo {
		t.Errorf("memo holds %d names, want at most %d", n, maxNamespaceMemo)
	}
	if got, want := ClusterNamespace("ws", "a"), names.ClusterNamespace("ws", "a"); got != want {
		t.Errorf("after the memo started over: %q, want %q", got, want)
	}
}
