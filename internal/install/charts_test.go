package install_test

import (
	"encoding/json"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/testenv"
)

var agentArgs = []string{"--set", "apiServerURL=https://upstream.example:6443", "--set", "token=tok", "--set", "tokenName=token-abc"}

func TestHelmLintEveryChart(t *testing.T) {
	for _, tc := range []struct {
		chart string
		args  []string
	}{
		{chart: "charts/fleet-crd"},
		{chart: "charts/fleet"},
		{chart: "charts/fleet", args: []string{"--set", "shards[0].id=a", "--set", "apiServerCA=pem", "--set", "bootstrap.enabled=false"}},
		{chart: "charts/fleet-agent", args: agentArgs},
	} {
		args := append([]string{"lint", "--strict", tc.chart, "-n", "cattle-fleet-system"}, tc.args...)
		out, err := helm(t, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.chart, err, out)
		}
		if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
			t.Fatalf("%s: unexpected lint output:\n%s", tc.chart, out)
		}
	}
}

// TestHelmTemplateMatchesEmbeddedRender proves that what `fleet install`
// prints (the embedded charts rendered with the Helm SDK) is exactly what
// `helm template` makes of the charts in the repository.
func TestHelmTemplateMatchesEmbeddedRender(t *testing.T) {
	for _, tc := range []struct {
		chart, release string
		set            map[string]any
		args           []string
		kinds          []string
	}{
		{chart: charts.CRD, release: "fleet-crd", kinds: []string{"CustomResourceDefinition"}},
		{chart: charts.Controller, release: "fleet",
			set:   map[string]any{"shards": []any{map[string]any{"id": "a"}}},
			args:  []string{"--set", "shards[0].id=a"},
			kinds: []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Role", "RoleBinding", "Service", "ServiceAccount"}},
		{chart: charts.Agent, release: "fleet-agent",
			set:   map[string]any{"apiServerURL": "https://upstream.example:6443", "token": "tok", "tokenName": "token-abc"},
			args:  agentArgs,
			kinds: []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Secret", "ServiceAccount"}},
	} {
		args := append([]string{"template", tc.release, "charts/" + tc.chart, "-n", "cattle-fleet-system"}, tc.args...)
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		fromHelm := byKey(t, out)
		embedded, err := install.Render(tc.chart, install.RenderOptions{ReleaseName: tc.release, Namespace: "cattle-fleet-system", Values: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		fromSDK := byKey(t, embedded)
		if len(fromHelm) == 0 || !reflect.DeepEqual(keys(fromHelm), keys(fromSDK)) {
			t.Fatalf("%s: helm template gives %v, embedded render gives %v", tc.chart, keys(fromHelm), keys(fromSDK))
		}
		for k, obj := range fromHelm {
			if !reflect.DeepEqual(obj.Object, fromSDK[k].Object) {
				a, _ := json.Marshal(obj.Object)
				b, _ := json.Marshal(fromSDK[k].Object)
				t.Fatalf("%s %s differs:\nhelm: %s\nsdk:  %s", tc.chart, k, a, b)
			}
		}
		var kinds []string
		seen := map[string]bool{}
		for _, obj := range fromHelm {
			if !seen[obj.GetKind()] {
				seen[obj.GetKind()] = true
				kinds = append(kinds, obj.GetKind())
			}
		}
		sort.Strings(kinds)
		if !reflect.DeepEqual(kinds, tc.kinds) {
			t.Fatalf("%s renders kinds %v, want %v", tc.chart, kinds, tc.kinds)
		}
	}
}

func TestAgentChartRefusesWrongNamespaceReleaseAndMissingValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "namespace", args: append([]string{"template", "fleet-agent", "charts/fleet-agent", "-n", "default"}, agentArgs...),
			want: `must be installed in namespace "cattle-fleet-system"`},
		{name: "release", args: append([]string{"template", "my-agent", "charts/fleet-agent", "-n", "cattle-fleet-system"}, agentArgs...),
			want: `must be installed with the release name "fleet-agent", not "my-agent"`},
		{name: "apiServerURL", args: []string{"template", "fleet-agent", "charts/fleet-agent", "-n", "cattle-fleet-system", "--set", "token=t", "--set", "tokenName=n"},
			want: "apiServerURL is required"},
		{name: "tokenName", args: []string{"template", "fleet-agent", "charts/fleet-agent", "-n", "cattle-fleet-system", "--set", "token=t", "--set", "apiServerURL=https://x"},
			want: "tokenName is required"},
		{name: "tls mode", args: append([]string{"template", "fleet-agent", "charts/fleet-agent", "-n", "cattle-fleet-system", "--set", "agentTLSMode=none"}, agentArgs...),
			want: `agentTLSMode "none" must be system-store or strict`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helm(t, tc.args...)
			if err == nil {
				t.Fatalf("helm accepted it:\n%s", out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
	// The embedded render (fleet install agent-token) refuses the same way.
	_, err := install.Render(charts.Agent, install.RenderOptions{ReleaseName: "fleet-agent", Namespace: "other",
		Values: map[string]any{"apiServerURL": "https://x", "token": "t", "tokenName": "n"}})
	if err == nil || !strings.Contains(err.Error(), `must be installed in namespace "cattle-fleet-system"`) {
		t.Fatalf("embedded render: got %v", err)
	}
}

// TestControllerDeploymentUsesOnlyRealFlags checks every flag the chart
// passes to fleet-controller against the flags cmd/fleet-controller defines.
func TestControllerDeploymentUsesOnlyRealFlags(t *testing.T) {
	// The agent settings' flags are defined with registration.AgentSettings.
	src := readFile(t, testenv.RepoRoot()+"/cmd/fleet-controller/main.go") + readFile(t, testenv.RepoRoot()+"/internal/registration/agentsettings.go")
	defined := map[string]bool{"zap-log-level": true, "zap-devel": true}
	for _, m := range regexp.MustCompile(`fs\.\w+Var\([^,]+,\s*"([a-z-]+)"|fs\.\w+\("([a-z-]+)"`).FindAllStringSubmatch(src, -1) {
		defined[m[1]+m[2]] = true
	}
	out, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system", Values: map[string]any{
		"shards": []any{map[string]any{"id": "s1", "nodeSelector": map[string]any{"zone": "a"}}}, "apiServerCA": "PEM",
		"apiServerURL": "https://fleet.example:6443", "debug": true, "helmops": map[string]any{"enabled": false},
	}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := install.Objects(out)
	if err != nil {
		t.Fatal(err)
	}
	deployments := map[string][]string{}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		if cmd := c["command"].([]any); cmd[0] != "fleet-controller" {
			t.Fatalf("%s runs %v", o.GetName(), cmd)
		}
		for _, a := range c["args"].([]any) {
			flag := strings.TrimPrefix(strings.SplitN(a.(string), "=", 2)[0], "--")
			if !defined[flag] {
				t.Fatalf("%s passes --%s, which fleet-controller does not define (defined: %v)", o.GetName(), flag, defined)
			}
			deployments[o.GetName()] = append(deployments[o.GetName()], a.(string))
		}
	}
	main, shard := strings.Join(deployments["fleet-controller"], " "), strings.Join(deployments["fleet-controller-shard-s1"], " ")
	for _, want := range []string{"--api-server-url=https://fleet.example:6443", "--api-server-ca-file=", "--bootstrap-namespace=fleet-local", "--agent-checkin-interval=15m", "--leader-elect=true", "--helmops=false",
		"--git-fetch-max-bytes=536870912 ", "--git-checkout-max-bytes=104857600 ", "--git-checkout-max-files=20000 "} {
		if !strings.Contains(main, want) {
			t.Fatalf("fleet-controller args %q lack %q", main, want)
		}
	}
	if strings.Contains(main, "--shard-id") || !strings.Contains(shard, "--shard-id=s1") || !strings.Contains(shard, "--bootstrap-namespace= ") {
		t.Fatalf("shard args wrong: main %q shard %q", main, shard)
	}
}

func byKey(t *testing.T, stream string) map[string]*unstructured.Unstructured {
	t.Helper()
	objs, err := install.Objects(stream)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o
	}
	return out
}

func keys(m map[string]*unstructured.Unstructured) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestAgentDeploymentUsesOnlyWhatTheAgentReads checks the agent chart's
// command, flags and environment against cmd/fleet-agent and internal/agent.
func TestAgentDeploymentUsesOnlyWhatTheAgentReads(t *testing.T) {
	src := readFile(t, testenv.RepoRoot()+"/cmd/fleet-agent/main.go") + readFile(t, testenv.RepoRoot()+"/internal/agent/agent.go")
	out, err := install.Render(charts.Agent, install.RenderOptions{ReleaseName: "fleet-agent", Namespace: "cattle-fleet-system", Values: map[string]any{
		"apiServerURL": "https://x", "token": "t", "tokenName": "n", "debug": true, "checkinInterval": "1m", "proxy": "http://proxy:3128",
	}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := install.Objects(out)
	if err != nil {
		t.Fatal(err)
	}
	var checked int
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		if cmd := c["command"].([]any); cmd[0] != "fleet-agent" {
			t.Fatalf("agent runs %v", cmd)
		}
		for _, a := range c["args"].([]any) {
			flag := strings.TrimPrefix(strings.SplitN(a.(string), "=", 2)[0], "--")
			if !strings.HasPrefix(flag, "zap-") && !strings.Contains(src, `"`+flag+`"`) {
				t.Fatalf("agent chart passes --%s, which fleet-agent does not define", flag)
			}
		}
		for _, e := range c["env"].([]any) {
			name := e.(map[string]any)["name"].(string)
			if strings.HasSuffix(name, "_PROXY") {
				continue // read by Go's net/http
			}
			if !strings.Contains(src, `"`+name+`"`) {
				t.Fatalf("agent chart sets %s, which fleet-agent never reads", name)
			}
			checked++
		}
	}
	if checked < 6 {
		t.Fatalf("only %d env vars checked", checked)
	}
}
