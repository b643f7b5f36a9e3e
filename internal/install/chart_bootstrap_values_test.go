package install_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/testenv"
)

// bootstrapValueFlags are the fleet-controller flags of Rancher's
// bootstrap.clusterLabels, repo, secret, branch and paths.
var bootstrapValueFlags = []string{"bootstrap-cluster-labels", "bootstrap-repo", "bootstrap-secret", "bootstrap-branch", "bootstrap-paths"}

// bootstrapArgs parses the bootstrap value flags out of args as
// fleet-controller does (the same pflag kinds): the labels, and the value
// of each other flag given (the labels flag is in set with value "set").
func bootstrapArgs(t *testing.T, args []string) (labels map[string]string, set map[string]string) {
	t.Helper()
	fs := pflag.NewFlagSet("fleet-controller", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	l := fs.StringToString("bootstrap-cluster-labels", nil, "")
	for _, name := range bootstrapValueFlags[1:] {
		fs.String(name, "", "")
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	set = map[string]string{}
	fs.Visit(func(f *pflag.Flag) {
		switch {
		case f.Name == bootstrapValueFlags[0]:
			set[f.Name] = "set"
		case slices.Contains(bootstrapValueFlags, f.Name):
			set[f.Name] = f.Value.String()
		}
	})
	return *l, set
}

// TestControllerChartPassesBootstrapValues: Rancher's
// bootstrap.clusterLabels and the bootstrap GitRepo values reach the
// unsharded fleet-controller (the one that bootstraps) as flags it
// defines, never a shard, and only with bootstrap enabled; paths is
// Rancher's comma-separated string (a list is joined), branch defaults to
// master. The fleet-controller ConfigMap records them as Rancher's does.
func TestControllerChartPassesBootstrapValues(t *testing.T) {
	src := readFile(t, testenv.RepoRoot()+"/cmd/fleet-controller/main.go")
	for _, f := range bootstrapValueFlags {
		if !strings.Contains(src, `"`+f+`"`) {
			t.Fatalf("cmd/fleet-controller defines no --%s", f)
		}
	}
	for _, tc := range []struct {
		name       string
		values     string
		wantLabels map[string]string
		want       map[string]string
	}{
		{name: "defaults", want: map[string]string{}},
		{name: "labels only", values: `
bootstrap: {clusterLabels: {env: prod, example.com/team: a}}
`, wantLabels: map[string]string{"env": "prod", "example.com/team": "a"}, want: map[string]string{"bootstrap-cluster-labels": "set"}},
		{name: "repo", values: `
bootstrap:
  clusterLabels: {env: prod}
  repo: git@github.com:example/fleet.git
  secret: git-auth
  paths: "clusters/local, fleet-config"
`, wantLabels: map[string]string{"env": "prod"}, want: map[string]string{"bootstrap-cluster-labels": "set",
			"bootstrap-repo": "git@github.com:example/fleet.git", "bootstrap-secret": "git-auth", "bootstrap-branch": "master", "bootstrap-paths": "clusters/local, fleet-config"}},
		{name: "paths list, branch empty", values: `
bootstrap: {repo: "https://example.com/r.git", branch: "", paths: [a, b]}
`, want: map[string]string{"bootstrap-repo": "https://example.com/r.git", "bootstrap-secret": "", "bootstrap-branch": "master", "bootstrap-paths": "a,b"}},
		{name: "bootstrap disabled", values: `
bootstrap: {enabled: false, clusterLabels: {env: prod}, repo: "https://example.com/r.git"}
`, want: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := yamlValues(t, tc.values+"\nshards: [{id: s1}]\n")
			deps := renderDeployments(t, charts.Controller, values)
			labels, set := bootstrapArgs(t, container(t, deps["fleet-controller"]).Args)
			if !maps.Equal(set, tc.want) || !maps.Equal(labels, tc.wantLabels) {
				t.Errorf("fleet-controller bootstrap flags %v (labels %v), want %v (labels %v)", set, labels, tc.want, tc.wantLabels)
			}
			if _, set := bootstrapArgs(t, container(t, deps["fleet-controller-shard-s1"]).Args); len(set) > 0 {
				t.Errorf("shard s1 got bootstrap flags %v", set)
			}
		})
	}
}

// TestControllerChartRefusesNumericLabelValues: an unquoted number in
// bootstrap.clusterLabels (which Helm reads as a float, printed as
// 2.0240101e+07) fails the render naming the label, instead of giving
// Cluster "local" a label value nobody wrote.
func TestControllerChartRefusesNumericLabelValues(t *testing.T) {
	values := yamlValues(t, "bootstrap: {clusterLabels: {build: 20240101}}\n")
	_, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system", Values: values})
	if err == nil || !strings.Contains(err.Error(), "bootstrap.clusterLabels.build") {
		t.Fatalf("render with a numeric label value: err = %v, want one naming bootstrap.clusterLabels.build", err)
	}
}

// TestControllerConfigMapRecordsBootstrapValues: the fleet-controller
// ConfigMap records the bootstrap values in Rancher's format, through the
// helm CLI as through the embedded render.
func TestControllerConfigMapRecordsBootstrapValues(t *testing.T) {
	out, err := helm(t, "template", "fleet", "charts/"+charts.Controller, "-n", "cattle-fleet-system",
		"--set", "bootstrap.clusterLabels.env=prod", "--set", "bootstrap.repo=https://example.com/r.git",
		"--set", "bootstrap.secret=git-auth", "--set-string", `bootstrap.paths=a\, b`)
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
			Bootstrap struct {
				Namespace, Repo, Secret, Branch, Paths string
				ClusterLabels                          map[string]string
			}
		}
		if err := json.Unmarshal([]byte(data), &cfg); err != nil {
			t.Fatalf("config %q: %v", data, err)
		}
		b := cfg.Bootstrap
		if b.Namespace != "fleet-local" || b.Repo != "https://example.com/r.git" || b.Secret != "git-auth" || b.Branch != "master" ||
			b.Paths != "a, b" || !maps.Equal(b.ClusterLabels, map[string]string{"env": "prod"}) {
			t.Fatalf("bootstrap config %+v", b)
		}
		return
	}
	t.Fatal("no ConfigMap fleet-controller")
}
