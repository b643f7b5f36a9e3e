package install_test

import (
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
)

// Values files written for Rancher Fleet's fleet and fleet-agent charts
// must work unchanged with these charts. Values are given as YAML and read
// as helm reads a values file (numbers are float64), or as a map where a
// test needs what `--set` makes of a number (int64).

// renderDeployments renders chart with values and returns its Deployments
// by name.
func renderDeployments(t *testing.T, chart string, values map[string]any) map[string]*appsv1.Deployment {
	t.Helper()
	opts := install.RenderOptions{Namespace: "cattle-fleet-system", Values: values}
	if chart == charts.Agent {
		opts.ReleaseName = "fleet-agent"
		for k, v := range map[string]any{"apiServerURL": "https://upstream.example:6443", "token": "t", "tokenName": "n"} {
			if _, ok := values[k]; !ok {
				values[k] = v
			}
		}
	}
	out, err := install.Render(chart, opts)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := install.Objects(out)
	if err != nil {
		t.Fatal(err)
	}
	deps := map[string]*appsv1.Deployment{}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
			t.Fatalf("Deployment %s: %v", o.GetName(), err)
		}
		if _, dup := deps[d.Name]; dup {
			t.Fatalf("chart renders Deployment %s twice", d.Name)
		}
		deps[d.Name] = d
	}
	return deps
}

func yamlValues(t *testing.T, doc string) map[string]any {
	t.Helper()
	v, err := install.ParseValues([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func depNames(m map[string]*appsv1.Deployment) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func container(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s has %d containers", d.Name, len(d.Spec.Template.Spec.Containers))
	}
	return d.Spec.Template.Spec.Containers[0]
}

func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

// TestControllerChartPassesAgentImage: the agent image of the chart
// (registry prefix, tag defaulting to appVersion) reaches fleet-controller,
// which installs it on clusters imported from a kubeconfig.
func TestControllerChartPassesAgentImage(t *testing.T) {
	chrt, err := install.LoadChart(charts.Controller)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{name: "defaults", values: map[string]any{}, want: "--agent-image=ghcr.io/fleetgo/fleet-agent:" + chrt.AppVersion()},
		{name: "rancher values", values: yamlValues(t, `
agentImage: {repository: rancher/fleet-agent, tag: v9}
global: {cattle: {systemDefaultRegistry: registry.example.com}}
shards: [{id: s1}]
`), want: "--agent-image=registry.example.com/rancher/fleet-agent:v9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deps := renderDeployments(t, charts.Controller, tc.values)
			if len(deps) == 0 {
				t.Fatal("no Deployment")
			}
			for name, d := range deps {
				if args := container(t, d).Args; !slices.Contains(args, tc.want) {
					t.Fatalf("%s args %q lack %q", name, args, tc.want)
				}
			}
		})
	}
	// `fleet install controller --agent-image` too.
	out, err := install.Controller(install.ControllerOptions{AgentImage: "registry.example:5000/fleet/agent:v7"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "- --agent-image=registry.example:5000/fleet/agent:v7\n") {
		t.Fatalf("fleet install controller --agent-image does not reach the controller:\n%s", out)
	}
}

// TestControllerChartProxyEnv: proxy/noProxy set the proxy environment of
// fleet-controller (git, Helm and OCI repositories, the API server).
func TestControllerChartProxyEnv(t *testing.T) {
	env := envOf(container(t, renderDeployments(t, charts.Controller, map[string]any{})["fleet-controller"]))
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if _, ok := env[k]; ok {
			t.Fatalf("without proxy the controller gets %s", k)
		}
	}
	deps := renderDeployments(t, charts.Controller, yamlValues(t, `
proxy: http://proxy.example:3128
noProxy: 10.0.0.0/8,.svc
shards: [{id: s1}]
`))
	for name, d := range deps {
		env := envOf(container(t, d))
		if env["HTTP_PROXY"] != "http://proxy.example:3128" || env["HTTPS_PROXY"] != "http://proxy.example:3128" || env["NO_PROXY"] != "10.0.0.0/8,.svc" {
			t.Fatalf("%s proxy env: %v", name, env)
		}
	}
}

// TestChartsDisableSecurityContext: disableSecurityContext drops the pod
// and container security contexts of both charts (as Rancher's charts do,
// e.g. to debug with a shell image).
func TestChartsDisableSecurityContext(t *testing.T) {
	for _, chart := range []string{charts.Controller, charts.Agent} {
		for _, disable := range []bool{false, true} {
			deps := renderDeployments(t, chart, map[string]any{"disableSecurityContext": disable, "shards": []any{map[string]any{"id": "s1"}}})
			if len(deps) == 0 {
				t.Fatalf("%s: no Deployment", chart)
			}
			for name, d := range deps {
				pod, ctr := d.Spec.Template.Spec.SecurityContext, container(t, d).SecurityContext
				if disable && (pod != nil || ctr != nil) {
					t.Fatalf("%s %s: disableSecurityContext=true keeps pod %+v container %+v", chart, name, pod, ctr)
				}
				if !disable && (pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || ctr == nil || ctr.ReadOnlyRootFilesystem == nil || !*ctr.ReadOnlyRootFilesystem) {
					t.Fatalf("%s %s: default security context missing: pod %+v container %+v", chart, name, pod, ctr)
				}
			}
		}
	}
}

// TestControllerChartExtraLabelsAndAnnotations: Rancher's per-component
// maps (extraLabels.fleetController.x) and flat maps (extraLabels.x) both
// label and annotate the controller's pods.
func TestControllerChartExtraLabelsAndAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
	}{
		{name: "rancher", values: `
extraLabels: {fleetController: {team: x, tier: 1}, gitjob: {other: y}, helmops: {}}
extraAnnotations: {fleetController: {foo: bar, count: 2}, gitjob: {other: y}}
`},
		{name: "flat", values: `
extraLabels: {team: x, tier: 1}
extraAnnotations: {foo: bar, count: 2}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := yamlValues(t, tc.values)
			vals["shards"] = []any{map[string]any{"id": "s1"}}
			deps := renderDeployments(t, charts.Controller, vals)
			for name, d := range deps {
				labels, ann := d.Spec.Template.Labels, d.Spec.Template.Annotations
				if labels["team"] != "x" || labels["tier"] != "1" || labels["app"] != "fleet-controller" {
					t.Fatalf("%s pod labels %v", name, labels)
				}
				if ann["foo"] != "bar" || ann["count"] != "2" {
					t.Fatalf("%s pod annotations %v", name, ann)
				}
				for _, k := range []string{"fleetController", "gitjob", "helmops", "other"} {
					if _, ok := labels[k]; ok {
						t.Fatalf("%s pod labels carry %s: %v", name, k, labels)
					}
					if _, ok := ann[k]; ok {
						t.Fatalf("%s pod annotations carry %s: %v", name, k, ann)
					}
				}
				if d.Labels["team"] != "x" || d.Annotations["foo"] != "bar" {
					t.Fatalf("%s labels %v annotations %v", name, d.Labels, d.Annotations)
				}
			}
		})
	}
}

// TestControllerChartShardIDs: numeric shard IDs (`--set shards[0].id=1`
// gives int64, `id: 0` in a values file float64 0) name their Deployment
// and flag like string IDs; a repeated ID gets one Deployment (the first),
// as in Rancher's chart.
func TestControllerChartShardIDs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
	}{
		{name: "values file", values: yamlValues(t, `
shards:
- id: 0
  nodeSelector: {zone: a}
- id: 1
- id: "1"
  nodeSelector: {zone: dup}
- id: blue
- id: 0
`)},
		{name: "--set", values: map[string]any{"shards": []any{
			map[string]any{"id": int64(0), "nodeSelector": map[string]any{"zone": "a"}},
			map[string]any{"id": int64(1)},
			map[string]any{"id": "1", "nodeSelector": map[string]any{"zone": "dup"}},
			map[string]any{"id": "blue"},
			map[string]any{"id": int64(0)},
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deps := renderDeployments(t, charts.Controller, tc.values)
			want := []string{"fleet-controller", "fleet-controller-shard-0", "fleet-controller-shard-1", "fleet-controller-shard-blue"}
			if got := depNames(deps); !slices.Equal(got, want) {
				t.Fatalf("Deployments %v, want %v", got, want)
			}
			for id, name := range map[string]string{"": "fleet-controller", "0": "fleet-controller-shard-0", "1": "fleet-controller-shard-1", "blue": "fleet-controller-shard-blue"} {
				d := deps[name]
				args := container(t, d).Args
				hasShardFlag := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--shard-id") })
				labels := d.Spec.Template.Labels
				if d.Spec.Selector.MatchLabels["fleet.cattle.io/shard-id"] != id || labels["fleet.cattle.io/shard-id"] != id {
					t.Fatalf("%s shard-id selector %v labels %v, want %q", name, d.Spec.Selector.MatchLabels, labels, id)
				}
				if id == "" {
					if hasShardFlag || labels["fleet.cattle.io/shard-default"] != "true" {
						t.Fatalf("%s: args %q labels %v", name, args, labels)
					}
					continue
				}
				if !slices.Contains(args, "--shard-id="+id) || labels["fleet.cattle.io/shard-default"] != "" {
					t.Fatalf("%s: args %q labels %v", name, args, labels)
				}
				if !slices.Contains(args, "--bootstrap-namespace=") || !slices.Contains(args, "--webhook-bind-address=0") {
					t.Fatalf("%s must not bootstrap or serve webhooks: %q", name, args)
				}
			}
			if z := deps["fleet-controller-shard-0"].Spec.Template.Spec.NodeSelector["zone"]; z != "a" {
				t.Fatalf("shard 0 nodeSelector zone %q, want a", z)
			}
			if z := deps["fleet-controller-shard-1"].Spec.Template.Spec.NodeSelector["zone"]; z != "" {
				t.Fatalf("shard 1 nodeSelector zone %q: the duplicate's settings won", z)
			}
		})
	}
}

// TestControllerChartPassesRegistrationSettings: Rancher's
// controller.registrationTokenTTL.required and
// ignoreClusterRegistrationLabels reach fleet-controller's flags.
func TestControllerChartPassesRegistrationSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{name: "defaults", values: map[string]any{}, want: "false"},
		{name: "set", values: yamlValues(t, `
controller: {registrationTokenTTL: {required: true}}
ignoreClusterRegistrationLabels: true
`), want: "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := container(t, renderDeployments(t, charts.Controller, tc.values)["fleet-controller"]).Args
			for _, want := range []string{"--registration-token-ttl-required=" + tc.want, "--ignore-cluster-registration-labels=" + tc.want} {
				if !slices.Contains(args, want) {
					t.Fatalf("fleet-controller args %q lack %q", args, want)
				}
			}
		})
	}
}

// TestControllerChartComponentResources: Rancher's chart takes the
// controller's resources also per component (resources.fleetController,
// beside fleetCleanup, gitjob, helmops...); such a values file sets this
// chart's controller resources, and the other components' are ignored
// rather than written into the container.
func TestControllerChartComponentResources(t *testing.T) {
	deps := renderDeployments(t, charts.Controller, yamlValues(t, `
resources:
  fleetController:
    requests: {cpu: 200m}
    limits: {memory: 2Gi}
  gitjob:
    limits: {memory: 3Gi}
shards: [{id: s1}]
`))
	for name, d := range deps {
		r := container(t, d).Resources
		if r.Limits.Memory().String() != "2Gi" || r.Requests.Cpu().String() != "200m" {
			t.Errorf("%s resources %+v, want fleetController's", name, r)
		}
	}
	// A flat map still applies as it is.
	d := renderDeployments(t, charts.Controller, yamlValues(t, "resources: {limits: {memory: 512Mi}}\n"))["fleet-controller"]
	if r := container(t, d).Resources; r.Limits.Memory().String() != "512Mi" {
		m := r.Limits.Memory().String()
		t.Errorf("flat resources: limits.memory %s, want 512Mi", m)
	}
}
