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

// agentNamespaceArg is the --bootstrap-agent-namespace args give, parsed
// as fleet-controller parses it, and whether it is given at all.
func agentNamespaceArg(t *testing.T, args []string) (string, bool) {
	t.Helper()
	fs := pflag.NewFlagSet("fleet-controller", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	v := fs.String("bootstrap-agent-namespace", "", "")
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return *v, fs.Changed("bootstrap-agent-namespace")
}

// TestControllerChartPassesBootstrapAgentNamespace: Rancher's
// bootstrap.agentNamespace reaches the unsharded fleet-controller as
// --bootstrap-agent-namespace (a flag it defines), never a shard, only
// with bootstrap enabled, and not at all when empty (the default); the
// fleet-controller ConfigMap records it as Rancher's does.
func TestControllerChartPassesBootstrapAgentNamespace(t *testing.T) {
	if src := readFile(t, testenv.RepoRoot()+"/cmd/fleet-controller/main.go"); !strings.Contains(src, `"bootstrap-agent-namespace"`) {
		t.Fatal("cmd/fleet-controller defines no --bootstrap-agent-namespace")
	}
	for _, tc := range []struct {
		name, values string
		want         string
		given        bool
	}{
		{name: "default"},
		{name: "set", values: "bootstrap: {agentNamespace: cattle-local-fleet-system}\n", want: "cattle-local-fleet-system", given: true},
		{name: "bootstrap disabled", values: "bootstrap: {enabled: false, agentNamespace: cattle-local-fleet-system}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deps := renderDeployments(t, charts.Controller, yamlValues(t, tc.values+"shards: [{id: s1}]\n"))
			if got, given := agentNamespaceArg(t, container(t, deps["fleet-controller"]).Args); got != tc.want || given != tc.given {
				t.Errorf("fleet-controller --bootstrap-agent-namespace %q (given %v), want %q (given %v)", got, given, tc.want, tc.given)
			}
			if _, given := agentNamespaceArg(t, container(t, deps["fleet-controller-shard-s1"]).Args); given {
				t.Error("shard s1 got --bootstrap-agent-namespace")
			}
		})
	}

	out, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system",
		Values: yamlValues(t, "bootstrap: {agentNamespace: cattle-local-fleet-system}\n")})
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
			Bootstrap struct{ AgentNamespace string }
		}
		if err := json.Unmarshal([]byte(data), &cfg); err != nil {
			t.Fatalf("config %q: %v", data, err)
		}
		if cfg.Bootstrap.AgentNamespace != "cattle-local-fleet-system" {
			t.Fatalf("ConfigMap fleet-controller bootstrap.agentNamespace %q, want cattle-local-fleet-system", cfg.Bootstrap.AgentNamespace)
		}
		return
	}
	t.Fatal("no ConfigMap fleet-controller")
}
