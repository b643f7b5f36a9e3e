package install_test

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
)

// TestControllerChartGitOpsSwitch: Rancher's gitops.enabled reaches every
// fleet-controller Deployment (shards too) as --gitops, both through the
// real helm CLI and through the embedded render `fleet install` uses. It
// defaults to true, also for a Rancher values file that sets only
// gitops.syncPeriod.
func TestControllerChartGitOpsSwitch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    string
		values map[string]any
		want   string
	}{
		{name: "default", want: "--gitops=true"},
		{name: "syncPeriod only", set: "gitops.syncPeriod=1h", values: map[string]any{"gitops": map[string]any{"syncPeriod": "1h"}}, want: "--gitops=true"},
		{name: "disabled", set: "gitops.enabled=false", values: map[string]any{"gitops": map[string]any{"enabled": false}}, want: "--gitops=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			helmArgs := []string{"template", "fleet", "charts/" + charts.Controller, "-n", "cattle-fleet-system", "--set", "shards[0].id=a"}
			if tc.set != "" {
				helmArgs = append(helmArgs, "--set", tc.set)
			}
			out, err := helm(t, helmArgs...)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := install.Objects(out)
			if err != nil {
				t.Fatal(err)
			}
			fromHelm := map[string][]string{}
			webhookService := false
			for _, o := range objs {
				webhookService = webhookService || (o.GetKind() == "Service" && o.GetName() == "gitjob")
				if o.GetKind() != "Deployment" {
					continue
				}
				containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
				fromHelm[o.GetName()] = args
			}

			values := map[string]any{"shards": []any{map[string]any{"id": "a"}}}
			for k, v := range tc.values {
				values[k] = v
			}
			embedded := renderDeployments(t, charts.Controller, values)

			// Without GitOps nothing receives webhooks: no Service, no port.
			gitOps := tc.want == "--gitops=true"
			if webhookService != gitOps {
				t.Errorf("helm template: Service gitjob rendered %v, want %v", webhookService, gitOps)
			}
			wantAddr := "--webhook-bind-address=0"
			if gitOps {
				wantAddr = "--webhook-bind-address=:8082"
			}
			if args := fromHelm["fleet-controller"]; !slices.Contains(args, wantAddr) {
				t.Errorf("helm template: fleet-controller args %q lack %q", args, wantAddr)
			}

			for _, name := range []string{"fleet-controller", "fleet-controller-shard-a"} {
				if args := fromHelm[name]; !slices.Contains(args, tc.want) {
					t.Errorf("helm template: %s args %q lack %q", name, args, tc.want)
				}
				d, ok := embedded[name]
				if !ok {
					t.Fatalf("embedded render has no Deployment %s", name)
				}
				if args := container(t, d).Args; !slices.Contains(args, tc.want) {
					t.Errorf("embedded render: %s args %q lack %q", name, args, tc.want)
				}
			}
		})
	}
}
