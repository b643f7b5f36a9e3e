package main

import (
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/testenv/helptest"
)

func TestMain(m *testing.M) { helptest.Run(m, main) }

// TestHelpNamesEveryEnvVar: every environment variable fleet-agent reads
// (the fleet-agent chart configures the agent through them) is named in
// the help of the flag it sets, and setting it really changes that flag's
// default.
func TestHelpNamesEveryEnvVar(t *testing.T) {
	helptest.CheckEnvNamed(t, map[string]helptest.EnvCase{
		"NAMESPACE":                           {Flag: "namespace", Value: "env-ns", Shown: `(default "env-ns")`},
		"CHECKIN_INTERVAL":                    {Flag: "checkin-interval", Value: "7m", Shown: "(default 7m0s)"},
		"BUNDLEDEPLOYMENT_RECONCILER_WORKERS": {Flag: "workers", Value: "7", Shown: "(default 7)"},
		"FLEET_AGENT_METRICS_BIND_ADDRESS":    {Flag: "metrics-bind-address", Value: ":9191", Shown: `(default ":9191")`},
		"CATTLE_ELECTION_LEASE_DURATION":      {Flag: "leader-election-lease-duration", Value: "41s", Shown: "(default 41s)"},
		"CATTLE_ELECTION_RENEW_DEADLINE":      {Flag: "leader-election-renew-deadline", Value: "31s", Shown: "(default 31s)"},
		"CATTLE_ELECTION_RETRY_PERIOD":        {Flag: "leader-election-retry-period", Value: "11s", Shown: "(default 11s)"},
		"FLEET_AGENT_PPROF_BIND_ADDRESS":      {Flag: "pprof-bind-address", Value: "127.0.0.1:6061", Shown: `(default "127.0.0.1:6061")`},
	})
}

// TestKubeconfigHelpNamesKUBECONFIG: without --kubeconfig the agent loads
// its cluster as controller-runtime does, where $KUBECONFIG wins over the
// in-cluster config; the help must not claim the in-cluster config is the
// default whatever the environment says.
func TestKubeconfigHelpNamesKUBECONFIG(t *testing.T) {
	l := helptest.Help(t, helptest.EnvRead(t))["kubeconfig"]
	for _, want := range []string{"$KUBECONFIG", "in-cluster", "~/.kube/config"} {
		if !strings.Contains(l, want) {
			t.Errorf("--kubeconfig help lacks %q: %q", want, l)
		}
	}
}
