package install_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/testenv"
)

// localAgentDisabledArg is the --bootstrap-local-agent-disabled args
// give, parsed as fleet-controller parses it.
func localAgentDisabledArg(t *testing.T, args []string) bool {
	t.Helper()
	fs := pflag.NewFlagSet("fleet-controller", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	v := fs.Bool("bootstrap-local-agent-disabled", false, "")
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return *v
}

// TestControllerChartPassesLocalAgentDisabled: Rancher's
// bootstrap.localAgentDisabled reaches the unsharded fleet-controller as
// --bootstrap-local-agent-disabled (a flag it defines), never a shard,
// only with bootstrap enabled and only when true (also as Rancher values
// files write it, a string); the fleet-controller ConfigMap records it as
// Rancher's does.
func TestControllerChartPassesLocalAgentDisabled(t *testing.T) {
	if src := readFile(t, testenv.RepoRoot()+"/cmd/fleet-controller/main.go"); !strings.Contains(src, `"bootstrap-local-agent-disabled"`) {
		t.Fatal("cmd/fleet-controller defines no --bootstrap-local-agent-disabled")
	}
	for _, tc := range []struct {
		name, values string
		want         bool
	}{
		{name: "default"},
		{name: "false", values: "bootstrap: {localAgentDisabled: false}\n"},
		{name: "true", values: "bootstrap: {localAgentDisabled: true}\n", want: true},
		{name: "string true", values: "bootstrap: {localAgentDisabled: \"true\"}\n", want: true},
		{name: "bootstrap disabled", values: "bootstrap: {enabled: false, localAgentDisabled: true}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deps := renderDeployments(t, charts.Controller, yamlValues(t, tc.values+"shards: [{id: s1}]\n"))
			if got := localAgentDisabledArg(t, container(t, deps["fleet-controller"]).Args); got != tc.want {
				t.Errorf("fleet-controller --bootstrap-local-agent-disabled %v, want %v", got, tc.want)
			}
			if localAgentDisabledArg(t, container(t, deps["fleet-controller-shard-s1"]).Args) {
				t.Error("shard s1 got --bootstrap-local-agent-disabled")
			}
		})
	}

	out, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system",
		Values: yamlValues(t, "bootstrap: {localAgentDisabled: true}\n")})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := install.Objects(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" || o.GetName() != "fleet-controller" {
			continue
		}
		data, _, _ := unstructured.NestedString(o.Object, "data", "config")
		var cfg struct {
			Bootstrap struct{ LocalAgentDisabled bool }
		}
		if err := json.Unmarshal([]byte(data), &cfg); err != nil {
			t.Fatalf("config %q: %v", data, err)
		}
		if !cfg.Bootstrap.LocalAgentDisabled {
			t.Fatalf("ConfigMap fleet-controller bootstrap.localAgentDisabled false in %s", data)
		}
		return
	}
	t.Fatal("no ConfigMap fleet-controller")
}
