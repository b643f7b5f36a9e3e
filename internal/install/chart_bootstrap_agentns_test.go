package install_test

import (
	"testing"

	"github.com/spf13/pflag"
)

// TestControllerChartPassesBootstrapAgentNamespace: Rancher's
// bootstrap.agentNamespace reaches the unsharded fleet-controller as
// --bootstrap-agent-namespace (a flag it defines), never a shard, only
// with bootstrap enabled, and not at all when empty (the default); the
// fleet-controller ConfigMap records it as Rancher's does.
func TestControllerChartPassesBootstrapAgentNamespace(t *testing.T) {
	const flag = "bootstrap-agent-namespace"
	checkBootstrapFlag(t, flag, func(fs *pflag.FlagSet) { fs.String(flag, "", "") }, []bootstrapFlagCase{
		{name: "default"},
		{name: "set", values: "bootstrap: {agentNamespace: cattle-local-fleet-system}\n", want: "cattle-local-fleet-system"},
		{name: "bootstrap disabled", values: "bootstrap: {enabled: false, agentNamespace: cattle-local-fleet-system}\n"},
	})

	var cfg struct {
		Bootstrap struct{ AgentNamespace string }
	}
	controllerConfig(t, "bootstrap: {agentNamespace: cattle-local-fleet-system}\n", &cfg)
	if cfg.Bootstrap.AgentNamespace != "cattle-local-fleet-system" {
		t.Fatalf("ConfigMap fleet-controller bootstrap.agentNamespace %q, want cattle-local-fleet-system", cfg.Bootstrap.AgentNamespace)
	}
}
