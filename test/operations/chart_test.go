package operations

import (
	"strings"
	"testing"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
)

// TestAgentChartMetrics: the agent serves /metrics only when the chart says
// so, on the chart's port; the Lease timings come from the chart.
func TestAgentChartMetrics(t *testing.T) {
	render := func(values map[string]any) string {
		t.Helper()
		values["apiServerURL"], values["token"], values["tokenName"] = "https://x", "t", "n"
		out, err := install.Render(charts.Agent, install.RenderOptions{ReleaseName: "fleet-agent", Namespace: "cattle-fleet-system", Values: values})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := render(map[string]any{}); strings.Contains(out, "FLEET_AGENT_METRICS_BIND_ADDRESS") {
		t.Error("metrics are on by default")
	}
	out := render(map[string]any{
		"metrics":        map[string]any{"enabled": true, "port": 9090},
		"leaderElection": map[string]any{"leaseDuration": "7s", "renewDeadline": "5s", "retryPeriod": "1s"},
	})
	for _, want := range []string{
		"name: FLEET_AGENT_METRICS_BIND_ADDRESS\n          value: \":9090\"",
		"name: CATTLE_ELECTION_LEASE_DURATION\n          value: \"7s\"",
		"name: CATTLE_ELECTION_RENEW_DEADLINE\n          value: \"5s\"",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered agent chart lacks %q", want)
		}
	}
}
