package install_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestChartsSystemDefaultRegistryReplacesRegistry: with
// global.cattle.systemDefaultRegistry the registry takes the place of the
// one the repository names (ghcr.io), for the controller image, the agent
// image of the fleet-agent chart and the --agent-image the controller
// installs on imported clusters: <registry>/fleetgo/fleet-agent, as
// docs/registration.md says, not <registry>/ghcr.io/fleetgo/fleet-agent.
// A Rancher repository without a registry (rancher/fleet-agent) is only
// prefixed. fleet-controller's privateRepoURL rule then replaces that
// registry in turn.
func TestChartsSystemDefaultRegistryReplacesRegistry(t *testing.T) {
	chrt, err := install.LoadChart(charts.Controller)
	if err != nil {
		t.Fatal(err)
	}
	v := chrt.AppVersion()
	for _, tc := range []struct {
		name, values                   string
		controller, agentArg, agentPod string
	}{
		{name: "ghcr.io repositories", values: `global: {cattle: {systemDefaultRegistry: "registry.internal:5000"}}`,
			controller: "registry.internal:5000/fleetgo/fleet-controller:" + v, agentArg: "registry.internal:5000/fleetgo/fleet-agent:" + v,
			agentPod: "registry.internal:5000/fleetgo/fleet-agent:" + v},
		{name: "trailing slash", values: `global: {cattle: {systemDefaultRegistry: "registry.example.com/"}}`,
			controller: "registry.example.com/fleetgo/fleet-controller:" + v, agentArg: "registry.example.com/fleetgo/fleet-agent:" + v,
			agentPod: "registry.example.com/fleetgo/fleet-agent:" + v},
		{name: "rancher and localhost repositories", values: `
global: {cattle: {systemDefaultRegistry: "registry.internal:5000"}}
image: {repository: rancher/fleet, tag: v9}
agentImage: {repository: localhost:5000/team/fleet-agent, tag: v9}
`, controller: "registry.internal:5000/rancher/fleet:v9", agentArg: "registry.internal:5000/team/fleet-agent:v9",
			agentPod: "registry.internal:5000/rancher/fleet:v9"}, // image.* is the agent's in the fleet-agent chart
		{name: "no registry", values: "{}",
			controller: "ghcr.io/fleetgo/fleet-controller:" + v, agentArg: "ghcr.io/fleetgo/fleet-agent:" + v, agentPod: "ghcr.io/fleetgo/fleet-agent:" + v},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := container(t, renderDeployments(t, charts.Controller, yamlValues(t, tc.values))["fleet-controller"])
			if c.Image != tc.controller {
				t.Errorf("controller image %q, want %q", c.Image, tc.controller)
			}
			if want := "--agent-image=" + tc.agentArg; !slices.Contains(c.Args, want) {
				t.Errorf("controller args %q lack %q", c.Args, want)
			}
			agent := container(t, renderDeployments(t, charts.Agent, yamlValues(t, tc.values))["fleet-agent"])
			if agent.Image != tc.agentPod {
				t.Errorf("fleet-agent chart image %q, want %q", agent.Image, tc.agentPod)
			}
		})
	}
	// What the chart passes is what fleet-controller's privateRepoURL rule
	// expects: the registry is replaced, the path stays.
	c := container(t, renderDeployments(t, charts.Controller, yamlValues(t, `global: {cattle: {systemDefaultRegistry: "registry.internal:5000"}}`))["fleet-controller"])
	for _, a := range c.Args {
		if img, ok := strings.CutPrefix(a, "--agent-image="); ok {
			if got, want := registration.AgentImage(img, "mirror.local"), "mirror.local/fleetgo/fleet-agent:"+v; got != want {
				t.Errorf("privateRepoURL mirror.local makes %q of %q, want %q", got, img, want)
			}
		}
	}
}

// TestChartsImagePullSecretsForms: global.cattle.imagePullSecrets takes
// Secret names and, as Rancher's charts do, {name: x} references, in both
// charts; a repeated name is listed once, and an object without a name
// fails the render with the value named instead of writing a broken pod.
func TestChartsImagePullSecretsForms(t *testing.T) {
	values := `global: {cattle: {imagePullSecrets: [{name: regcred}, other, regcred]}}`
	want := []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "other"}}
	for chart, dep := range map[string]string{charts.Controller: "fleet-controller", charts.Agent: "fleet-agent"} {
		d := renderDeployments(t, chart, yamlValues(t, values))[dep]
		if got := d.Spec.Template.Spec.ImagePullSecrets; !slices.Equal(got, want) {
			t.Errorf("%s imagePullSecrets %v, want %v", chart, got, want)
		}
		if got := renderDeployments(t, chart, yamlValues(t, "{}"))[dep].Spec.Template.Spec.ImagePullSecrets; got != nil {
			t.Errorf("%s without pull secrets: %v", chart, got)
		}
		opts := install.RenderOptions{Namespace: "cattle-fleet-system", Values: yamlValues(t, `
global: {cattle: {imagePullSecrets: [{secret: regcred}]}}
apiServerURL: https://upstream.example:6443
token: t
tokenName: token-name
`)}
		if chart == charts.Agent {
			opts.ReleaseName = "fleet-agent"
		}
		if _, err := install.Render(chart, opts); err == nil || !strings.Contains(err.Error(), "global.cattle.imagePullSecrets") {
			t.Errorf("%s with a pull secret without name: err = %v", chart, err)
		}
	}
}

// TestControllerConfigMapRecordsPullSecretNames: the fleet-controller
// ConfigMap records global.cattle.imagePullSecrets as Rancher's config
// does, a list of Secret names, whichever form the values use.
func TestControllerConfigMapRecordsPullSecretNames(t *testing.T) {
	for values, want := range map[string][]string{
		`global: {cattle: {imagePullSecrets: [{name: regcred}, other, regcred]}}`: {"regcred", "other"},
		`{}`: {},
	} {
		out, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system", Values: yamlValues(t, values)})
		if err != nil {
			t.Fatal(err)
		}
		objs, err := install.Objects(out)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, o := range objs {
			if o.GetKind() != "ConfigMap" || o.GetName() != "fleet-controller" {
				continue
			}
			found = true
			data, _, _ := unstructured.NestedString(o.Object, "data", "config")
			var cfg struct {
				ImagePullSecrets []string `json:"imagePullSecrets"`
			}
			if err := json.Unmarshal([]byte(data), &cfg); err != nil {
				t.Fatalf("%s: config %q: %v", values, data, err)
			}
			if !slices.Equal(cfg.ImagePullSecrets, want) {
				t.Errorf("%s: config imagePullSecrets %q, want %q", values, cfg.ImagePullSecrets, want)
			}
		}
		if !found {
			t.Fatalf("%s: no ConfigMap fleet-controller", values)
		}
	}
}
