package install_test

import (
	"testing"

	"github.com/spf13/pflag"
)

// TestControllerChartPassesLocalAgentDisabled: Rancher's
// bootstrap.localAgentDisabled reaches the unsharded fleet-controller as
// --bootstrap-local-agent-disabled (a flag it defines), never a shard,
// only with bootstrap enabled and only when true (also as Rancher values
// files write it, a string); the fleet-controller ConfigMap records it as
// Rancher's does.
func TestControllerChartPassesLocalAgentDisabled(t *testing.T) {
	const flag = "bootstrap-local-agent-disabled"
	checkBootstrapFlag(t, flag, func(fs *pflag.FlagSet) { fs.Bool(flag, false, "") }, []bootstrapFlagCase{
		{name: "default", want: "false"},
		{name: "false", values: "bootstrap: {localAgentDisabled: false}\n", want: "false"},
		{name: "true", values: "bootstrap: {localAgentDisabled: true}\n", want: "true"},
		{name: "string true", values: "bootstrap: {localAgentDisabled: \"true\"}\n", want: "true"},
		{name: "bootstrap disabled", values: "bootstrap: {enabled: false, localAgentDisabled: true}\n", want: "false"},
	})

	var cfg struct {
		Bootstrap struct{ LocalAgentDisabled bool }
	}
	controllerConfig(t, "bootstrap: {localAgentDisabled: true}\n", &cfg)
	if !cfg.Bootstrap.LocalAgentDisabled {
		t.Fatalf("ConfigMap fleet-controller bootstrap.localAgentDisabled false, want true")
	}
}
