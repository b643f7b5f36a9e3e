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

// bootstrapFlagCase is controller chart values and the value the
// unsharded fleet-controller must see for the flag under test.
type bootstrapFlagCase struct {
	name, values string
	// want is the flag's value as fleet-controller parses it; the flag
	// must be given exactly when want is not the flag's default, so that
	// default values write no flag.
	want string
}

// controllerFlag is flag in args as fleet-controller parses it (define
// adds it with the kind fleet-controller gives it; other flags are
// ignored), its value the default when not given, and whether it is
// given.
func controllerFlag(t *testing.T, args []string, flag string, define func(fs *pflag.FlagSet)) (f *pflag.Flag, given bool) {
	t.Helper()
	fs := pflag.NewFlagSet("fleet-controller", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	define(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return fs.Lookup(flag), fs.Changed(flag)
}

// checkBootstrapFlag checks that cmd/fleet-controller defines --flag and
// that, for each case, the controller chart passes it to the unsharded
// fleet-controller (the one that bootstraps) as the case wants, and never
// to a shard.
func checkBootstrapFlag(t *testing.T, flag string, define func(fs *pflag.FlagSet), cases []bootstrapFlagCase) {
	t.Helper()
	if src := readFile(t, testenv.RepoRoot()+"/cmd/fleet-controller/main.go"); !strings.Contains(src, `"`+flag+`"`) {
		t.Fatalf("cmd/fleet-controller defines no --%s", flag)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			deps := renderDeployments(t, charts.Controller, yamlValues(t, tc.values+"shards: [{id: s1}]\n"))
			f, given := controllerFlag(t, container(t, deps["fleet-controller"]).Args, flag, define)
			if got, wantGiven := f.Value.String(), tc.want != f.DefValue; got != tc.want || given != wantGiven {
				t.Errorf("fleet-controller --%s %q (given %v), want %q (given %v)", flag, got, given, tc.want, wantGiven)
			}
			if _, given := controllerFlag(t, container(t, deps["fleet-controller-shard-s1"]).Args, flag, define); given {
				t.Errorf("shard s1 got --%s", flag)
			}
		})
	}
}

// controllerConfig decodes into cfg the config the fleet-controller
// ConfigMap records when the controller chart is rendered with values
// (YAML), as Rancher's chart records it.
func controllerConfig(t *testing.T, values string, cfg any) {
	t.Helper()
	out, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system", Values: yamlValues(t, values)})
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
		if err := json.Unmarshal([]byte(data), cfg); err != nil {
			t.Fatalf("config %q: %v", data, err)
		}
		return
	}
	t.Fatal("no ConfigMap fleet-controller")
}
