package install_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/fleetgo/fleet/charts"
)

// controllerContainer renders the fleet chart with values and returns the
// args and env (name=value) of fleet-controller's container.
func controllerContainer(t *testing.T, values map[string]any) (args, env []string) {
	t.Helper()
	d := renderDeployments(t, charts.Controller, values)["fleet-controller"]
	if d == nil {
		t.Fatal("no fleet-controller Deployment")
	}
	c := container(t, d)
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	return c.Args, env
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
