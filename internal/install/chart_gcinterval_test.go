package install_test

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/testenv"
)

// TestControllerChartPassesGarbageCollectionInterval: the fleet chart's
// garbageCollectionInterval reaches fleet-controller as
// --garbage-collection-interval (a flag it defines, parsed as it parses
// it) when it is not Rancher's default 15m; the default passes nothing, so
// that the controller leaves imported agents' ConfigMaps, and the agents,
// as they were.
func TestControllerChartPassesGarbageCollectionInterval(t *testing.T) {
	if src := readFile(t, testenv.RepoRoot()+"/cmd/fleet-controller/main.go"); !strings.Contains(src, `"garbage-collection-interval"`) {
		t.Fatal("cmd/fleet-controller defines no --garbage-collection-interval")
	}
	for _, tc := range []struct {
		name   string
		values string
		want   time.Duration // 0: flag absent
	}{
		{name: "defaults"},
		{name: "15m", values: "garbageCollectionInterval: 15m\n"},
		{name: "empty", values: "garbageCollectionInterval: \"\"\n"},
		{name: "1h", values: "garbageCollectionInterval: 1h\n", want: time.Hour},
		{name: "30m", values: "garbageCollectionInterval: 30m\n", want: 30 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deps := renderDeployments(t, charts.Controller, yamlValues(t, tc.values))
			args := container(t, deps["fleet-controller"]).Args
			fs := pflag.NewFlagSet("fleet-controller", pflag.ContinueOnError)
			fs.ParseErrorsAllowlist.UnknownFlags = true
			gc := fs.Duration("garbage-collection-interval", 0, "")
			if err := fs.Parse(args); err != nil {
				t.Fatalf("parsing %q: %v", args, err)
			}
			if set := fs.Changed("garbage-collection-interval"); set != (tc.want != 0) || *gc != tc.want {
				t.Errorf("--garbage-collection-interval given %v, %v; want %v (absent: 0)", set, *gc, tc.want)
			}
		})
	}
}

// TestControllerChartRefusesBadGarbageCollectionInterval: a value that is
// no duration fails the install with the value named, instead of a
// fleet-controller that exits at flag parsing on every start.
func TestControllerChartRefusesBadGarbageCollectionInterval(t *testing.T) {
	_, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system", Values: yamlValues(t, "garbageCollectionInterval: fifteen minutes\n")})
	if err == nil || !strings.Contains(err.Error(), `garbageCollectionInterval "fifteen minutes"`) {
		t.Fatalf("render with garbageCollectionInterval \"fifteen minutes\": err = %v", err)
	}
}
