package install_test

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
)

// controllerDurationFlags are the fleet chart's duration values, the
// fleet-controller flag each one sets and that flag's default there.
var controllerDurationFlags = []struct {
	value, flag string
	def         time.Duration
}{
	{value: "agentCheckinInterval", flag: "agent-checkin-interval", def: 15 * time.Minute},
	{value: "garbageCollectionInterval", flag: "garbage-collection-interval"},
	{value: "controller.agentTokenTTL", flag: "agent-token-ttl", def: 720 * time.Hour},
	{value: "leaderElection.leaseDuration", flag: "leader-election-lease-duration", def: 30 * time.Second},
	{value: "leaderElection.renewDeadline", flag: "leader-election-renew-deadline", def: 25 * time.Second},
	{value: "leaderElection.retryPeriod", flag: "leader-election-retry-period", def: 10 * time.Second},
	{value: "agent.leaderElection.leaseDuration", flag: "agent-leader-election-lease-duration", def: 30 * time.Second},
	{value: "agent.leaderElection.renewDeadline", flag: "agent-leader-election-renew-deadline", def: 25 * time.Second},
	{value: "agent.leaderElection.retryPeriod", flag: "agent-leader-election-retry-period", def: 10 * time.Second},
}

// nestedValue is the values map for key "a.b.c" = v.
func nestedValue(key string, v any) map[string]any {
	parts := strings.Split(key, ".")
	out := map[string]any{parts[len(parts)-1]: v}
	for i := len(parts) - 2; i >= 0; i-- {
		out = map[string]any{parts[i]: out}
	}
	return out
}

// TestControllerChartDurationsAsRancher: every duration value of the
// fleet chart takes what Rancher's chart takes: Go durations with decimals
// (1.5h) and 0, which is the default (fleet-controller gets its default,
// or no flag); fleet-controller parses what the chart passes. Garbage is
// still refused, with the value named.
func TestControllerChartDurationsAsRancher(t *testing.T) {
	for _, d := range controllerDurationFlags {
		for _, tc := range []struct {
			given any
			want  time.Duration
		}{
			{given: "0", want: d.def},
			{given: float64(0), want: d.def}, // `agentCheckinInterval: 0` in a values file
			{given: "0s", want: d.def},
			{given: "1.5h", want: 90 * time.Minute},
			{given: "1h0.5m", want: time.Hour + 30*time.Second},
		} {
			args := container(t, renderDeployments(t, charts.Controller, nestedValue(d.value, tc.given))["fleet-controller"]).Args
			fs := pflag.NewFlagSet("fleet-controller", pflag.ContinueOnError)
			fs.ParseErrorsAllowlist.UnknownFlags = true
			got := fs.Duration(d.flag, d.def, "")
			if err := fs.Parse(args); err != nil {
				t.Fatalf("%s=%v: fleet-controller cannot parse %q: %v", d.value, tc.given, args, err)
			}
			if *got != tc.want {
				t.Errorf("%s=%v: --%s %v, want %v", d.value, tc.given, d.flag, *got, tc.want)
			}
		}
		for _, bad := range []string{"15", "fifteen minutes", "-1h", "1.5", "1h-5m"} {
			_, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system", Values: nestedValue(d.value, bad)})
			if want := d.value + ` "` + bad + `" is not a duration`; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s=%q: err = %v, want one saying %s", d.value, bad, err, want)
			}
		}
	}
}

// TestAgentChartChecksValuesAsFleetChart: the fleet-agent chart checks
// checkinInterval, leaderElection.* and
// agent.reconciler.workers.bundledeployment as the fleet chart does,
// instead of handing the agent a value it would silently replace with its
// default; decimals are taken, and 0 is the default (for checkinInterval:
// the manager's, from the token's values; for workers: 50).
// agent.replicas 0 is taken as given: it stops the agent.
func TestAgentChartChecksValuesAsFleetChart(t *testing.T) {
	for _, tc := range []struct {
		values, env, want string
	}{
		{values: "checkinInterval: 1.5h", env: "CHECKIN_INTERVAL", want: "1.5h"},
		{values: "{checkinInterval: 0, internal: {checkinInterval: 10m}}", env: "CHECKIN_INTERVAL", want: "10m"},
		{values: "leaderElection: {leaseDuration: 0}", env: "CATTLE_ELECTION_LEASE_DURATION", want: "30s"},
		{values: "leaderElection: {retryPeriod: 2.5s}", env: "CATTLE_ELECTION_RETRY_PERIOD", want: "2.5s"},
		{values: "agent: {reconciler: {workers: {bundledeployment: 7}}}", env: "BUNDLEDEPLOYMENT_RECONCILER_WORKERS", want: "7"},
		{values: "agent: {reconciler: {workers: {bundledeployment: 0}}}", env: "BUNDLEDEPLOYMENT_RECONCILER_WORKERS", want: "50"},
		{values: "agent: {reconciler: {workers: {bundledeployment: \"0\"}}}", env: "BUNDLEDEPLOYMENT_RECONCILER_WORKERS", want: "50"},
		{values: "{}", env: "BUNDLEDEPLOYMENT_RECONCILER_WORKERS", want: "50"},
	} {
		env := envOf(container(t, renderDeployments(t, charts.Agent, yamlValues(t, tc.values))["fleet-agent"]))
		if env[tc.env] != tc.want {
			t.Errorf("%s: %s=%q, want %q", tc.values, tc.env, env[tc.env], tc.want)
		}
	}
	for _, tc := range []struct{ values, want string }{
		{values: "checkinInterval: fast", want: `checkinInterval "fast" is not a duration`},
		{values: "checkinInterval: 15", want: `checkinInterval "15" is not a duration`},
		{values: "leaderElection: {leaseDuration: 30}", want: `leaderElection.leaseDuration "30" is not a duration`},
		{values: "leaderElection: {renewDeadline: soon}", want: `leaderElection.renewDeadline "soon" is not a duration`},
		{values: "leaderElection: {retryPeriod: -10s}", want: `leaderElection.retryPeriod "-10s" is not a duration`},
		{values: "agent: {reconciler: {workers: {bundledeployment: -1}}}", want: `agent.reconciler.workers.bundledeployment "-1" is not a whole number`},
		{values: "agent: {replicas: -1}", want: `agent.replicas "-1" is not a whole number`},
		{values: "agent: {replicas: two}", want: `agent.replicas "two" is not a whole number`},
		{values: "agent: {reconciler: {workers: {bundledeployment: many}}}", want: `agent.reconciler.workers.bundledeployment "many" is not a whole number`},
	} {
		vals := yamlValues(t, tc.values)
		for k, v := range map[string]any{"apiServerURL": "https://upstream.example:6443", "token": "t", "tokenName": "n"} {
			vals[k] = v
		}
		_, err := install.Render(charts.Agent, install.RenderOptions{ReleaseName: "fleet-agent", Namespace: "cattle-fleet-system", Values: vals})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one saying %s", tc.values, err, tc.want)
		}
	}
	for _, tc := range []struct {
		values string
		want   int32
	}{
		{values: "{}", want: 1},
		{values: "agent: {replicas: 0}", want: 0},
		{values: "agent: {replicas: \"0\"}", want: 0},
		{values: "agent: {replicas: 3}", want: 3},
	} {
		d := renderDeployments(t, charts.Agent, yamlValues(t, tc.values))["fleet-agent"]
		if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.want {
			t.Errorf("%s: replicas = %v, want %d", tc.values, d.Spec.Replicas, tc.want)
		}
	}
}
