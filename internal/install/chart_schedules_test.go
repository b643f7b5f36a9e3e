package install_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
)

// controllerContainer renders the fleet chart with values and returns the
// args and env (name=value) of fleet-controller's container.
func controllerContainer(t *testing.T, values map[string]any) (args, env []string) {
	t.Helper()
	out, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system", Values: values})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := install.Objects(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" || o.GetName() != "fleet-controller" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		for _, a := range c["args"].([]any) {
			args = append(args, a.(string))
		}
		for _, e := range c["env"].([]any) {
			m := e.(map[string]any)
			env = append(env, fmt.Sprintf("%v=%v", m["name"], m["value"]))
		}
		return args, env
	}
	t.Fatal("no fleet-controller Deployment")
	return nil, nil
}

func isSchedulesFlag(a string) bool { return strings.HasPrefix(a, "--schedules") }

// TestChartEnablesSchedules: Schedules are off by default; chart value
// schedules.enabled turns them on with --schedules=true, and Rancher's
// extraEnv EXPERIMENTAL_SCHEDULES=true reaches the controller, whose flag
// defaults to it, without a flag overriding it.
func TestChartEnablesSchedules(t *testing.T) {
	args, _ := controllerContainer(t, nil)
	if slices.ContainsFunc(args, isSchedulesFlag) {
		t.Errorf("default args %v set --schedules", args)
	}
	args, _ = controllerContainer(t, map[string]any{"schedules": map[string]any{"enabled": true}})
	if !slices.Contains(args, "--schedules=true") {
		t.Errorf("schedules.enabled=true: args %v lack --schedules=true", args)
	}
	args, env := controllerContainer(t, map[string]any{"extraEnv": []any{map[string]any{"name": "EXPERIMENTAL_SCHEDULES", "value": "true"}}})
	if !slices.Contains(env, "EXPERIMENTAL_SCHEDULES=true") || slices.ContainsFunc(args, isSchedulesFlag) {
		t.Errorf("Rancher's extraEnv: env %v, args %v", env, args)
	}
}
