package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCountAgentRequests: an agent's check-in counts as a heartbeat
// whether it patches its Cluster or goes through the content API; the
// manager's writes and the registration token's requests are counted apart.
func TestCountAgentRequests(t *testing.T) {
	at := "2026-11-23T05:00:01Z"
	lines := []string{
		`{"stage":"ResponseComplete","verb":"patch","user":{"username":"system:serviceaccount:cluster-a:request-1"},"objectRef":{"resource":"clusters","subresource":"status","namespace":"ws"},"requestReceivedTimestamp":"` + at + `"}`,
		`{"stage":"ResponseComplete","verb":"update","user":{"username":"system:serviceaccount:cluster-b:request-2"},"objectRef":{"resource":"clusterstatuses","namespace":"cluster-b"},"requestReceivedTimestamp":"` + at + `"}`,
		`{"stage":"ResponseComplete","verb":"update","user":{"username":"system:serviceaccount:cluster-b:request-2"},"objectRef":{"resource":"bundledeployments","subresource":"status","namespace":"cluster-b"},"requestReceivedTimestamp":"` + at + `"}`,
		`{"stage":"ResponseComplete","verb":"get","user":{"username":"system:serviceaccount:cluster-b:request-2"},"objectRef":{"resource":"bundlecontents","namespace":"cluster-b"},"requestReceivedTimestamp":"` + at + `"}`,
		`{"stage":"ResponseComplete","verb":"patch","user":{"username":"system:serviceaccount:fleet-system:fleet-controller"},"userAgent":"` + managerUserAgent + `/v0","objectRef":{"resource":"clusters","subresource":"status","namespace":"ws"},"requestReceivedTimestamp":"` + at + `"}`,
		`{"stage":"ResponseComplete","verb":"create","user":{"username":"system:serviceaccount:ws:import-token"},"objectRef":{"resource":"clusterregistrations","namespace":"ws"},"requestReceivedTimestamp":"` + at + `"}`,
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	r, err := countAgentRequests(path, "ws", "", from, from.Add(time.Minute), 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 4 || r.Agents != 2 || r.Heartbeats != 2 || r.OtherWrites != 1 {
		t.Errorf("total %d, agents %d, heartbeats %d, other writes %d; want 4, 2, 2, 1", r.Total, r.Agents, r.Heartbeats, r.OtherWrites)
	}
	if r.Manager != 1 || r.ManagerWrites["patch clusters/status"] != 1 {
		t.Errorf("manager %d, writes %v; want 1 patch of clusters/status", r.Manager, r.ManagerWrites)
	}
}

// TestMetricLabel reads labels out of /metrics series lines as the API
// server writes them; an absent label is empty, not a neighbour's value.
func TestMetricLabel(t *testing.T) {
	line := `apiserver_terminated_watchers_total{group="fleet.cattle.io",resource="bundledeployments"} 2`
	for _, tc := range []struct{ name, want string }{
		{"group", "fleet.cattle.io"},
		{"resource", "bundledeployments"},
		{"source", ""}, // inside "resource"
		{"verb", ""},
	} {
		if got := metricLabel(line, tc.name); got != tc.want {
			t.Errorf("metricLabel(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
	req := `apiserver_request_total{code="200",group="",resource="configmaps",subresource="status",verb="PUT"} 7`
	for _, tc := range []struct{ name, want string }{
		{"group", ""},
		{"resource", "configmaps"},
		{"subresource", "status"},
		{"code", "200"},
	} {
		if got := metricLabel(req, tc.name); got != tc.want {
			t.Errorf("metricLabel(request, %s) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
