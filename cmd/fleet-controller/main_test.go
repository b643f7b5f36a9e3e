package main

import (
	"strings"
	"testing"

	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv/helptest"
)

func TestMain(m *testing.M) { helptest.Run(m, main) }

// TestHelpNamesEveryEnvVar: every environment variable fleet-controller
// reads is named in the help of the flag it sets, and setting it really
// changes that flag's default (so the help tells an operator who sets the
// variable in the Deployment what it does).
func TestHelpNamesEveryEnvVar(t *testing.T) {
	helptest.CheckEnvNamed(t, map[string]helptest.EnvCase{
		"NAMESPACE":                             {Flag: "namespace", Value: "env-ns", Shown: `(default "env-ns")`},
		"API_SERVER_URL":                        {Flag: "api-server-url", Value: "https://env.example:6443", Shown: `(default "https://env.example:6443")`},
		"FLEET_METRICS_BIND_ADDRESS":            {Flag: "metrics-bind-address", Value: ":9999", Shown: `(default ":9999")`},
		"AGENT_IMAGE":                           {Flag: "agent-image", Value: "registry.example/agent:1", Shown: `(default "registry.example/agent:1")`},
		"FLEET_REGISTRATION_TOKEN_TTL_REQUIRED": {Flag: "registration-token-ttl-required", Value: "true", Shown: "(default true)"},
		"KUBECONFIG":                            {Flag: "kubeconfig", Value: "/env/kubeconfig", Shown: `(default "/env/kubeconfig")`},
		"FLEET_WEBHOOK_ALLOW_UNSIGNED":          {Flag: "webhook-allow-unsigned", Value: "true", Shown: "(default true)"},
		"EXPERIMENTAL_SCHEDULES":                {Flag: "schedules", Value: "true", Shown: "(default true)"},
	})
}

// TestHelpTellsEmptyDefaults: flags whose empty value means something
// other than nothing say what: the agent image the manager then installs,
// and where the manager's own kubeconfig then comes from.
func TestHelpTellsEmptyDefaults(t *testing.T) {
	lines := helptest.Help(t, helptest.EnvRead(t))
	if l := lines["agent-image"]; !strings.Contains(l, registration.DefaultAgentImage) {
		t.Errorf("--agent-image help lacks the image used when it is empty (%s): %q", registration.DefaultAgentImage, l)
	}
	if l := lines["kubeconfig"]; !strings.Contains(l, "in-cluster") || !strings.Contains(l, "~/.kube/config") {
		t.Errorf("--kubeconfig help does not say what an empty value loads: %q", l)
	}
}
