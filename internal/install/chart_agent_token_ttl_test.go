package install_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/testenv"
)

// ttlArgs returns the --agent-token-ttl arguments of each fleet-controller
// Deployment of a rendered stream.
func ttlArgs(t *testing.T, stream string) map[string][]string {
	t.Helper()
	objs, err := install.Objects(stream)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		out[o.GetName()] = nil
		for _, a := range args {
			if strings.HasPrefix(a, "--agent-token-ttl") {
				out[o.GetName()] = append(out[o.GetName()], a)
			}
		}
	}
	return out
}

// TestControllerChartAgentTokenTTL: controller.agentTokenTTL is how a Helm
// user sets the lifetime of agent credentials. Empty (the default) passes
// nothing, so fleet-controller's own default applies and the rendered
// manifests do not change; set, it reaches every fleet-controller
// Deployment (shards too) through the real helm CLI and the embedded
// render; a value fleet-controller could not parse is refused at install
// instead of crash-looping the controller.
func TestControllerChartAgentTokenTTL(t *testing.T) {
	if !strings.Contains(readFile(t, testenv.RepoRoot()+"/cmd/fleet-controller/main.go"), `"agent-token-ttl"`) {
		t.Fatal("fleet-controller defines no --agent-token-ttl")
	}
	base := []string{"template", "fleet", "charts/" + charts.Controller, "-n", "cattle-fleet-system", "--set", "shards[0].id=a"}
	for _, tc := range []struct {
		name, set string
		values    map[string]any
		want      string
	}{
		{name: "default"},
		{name: "set", set: "controller.agentTokenTTL=168h", values: map[string]any{"controller": map[string]any{"agentTokenTTL": "168h"}}, want: "--agent-token-ttl=168h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := base
			if tc.set != "" {
				args = append(append([]string{}, base...), "--set", tc.set)
			}
			fromHelm, err := helm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			values := map[string]any{"shards": []any{map[string]any{"id": "a"}}}
			for k, v := range tc.values {
				values[k] = v
			}
			embedded, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system", Values: values})
			if err != nil {
				t.Fatal(err)
			}
			for how, stream := range map[string]string{"helm template": fromHelm, "embedded render": embedded} {
				got := ttlArgs(t, stream)
				for _, name := range []string{"fleet-controller", "fleet-controller-shard-a"} {
					a, ok := got[name]
					if !ok {
						t.Fatalf("%s: no Deployment %s", how, name)
					}
					switch {
					case tc.want == "" && len(a) != 0:
						t.Errorf("%s: %s passes %q, want fleet-controller's default", how, name, a)
					case tc.want != "" && (len(a) != 1 || a[0] != tc.want):
						t.Errorf("%s: %s passes %q, want %s", how, name, a, tc.want)
					}
					for _, arg := range a {
						if _, err := time.ParseDuration(strings.TrimPrefix(arg, "--agent-token-ttl=")); err != nil {
							t.Errorf("%s: %s passes %q, which fleet-controller cannot parse: %v", how, name, arg, err)
						}
					}
				}
			}
		})
	}

	for _, bad := range []string{"30d", "3600"} {
		_, err := helm(t, append(append([]string{}, base...), "--set", "controller.agentTokenTTL="+bad)...)
		if err == nil || !strings.Contains(err.Error(), "is not a duration such as 720h") {
			t.Errorf("helm template with controller.agentTokenTTL=%s: err = %v, want the refusal", bad, err)
		}
	}
}
