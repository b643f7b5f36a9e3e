package install_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/registration"
)

// agentSettingsArgs are the agent settings args give, parsed with
// fleet-controller's own flags (registration.AgentSettings.AddFlags).
func agentSettingsArgs(t *testing.T, args []string) registration.AgentSettings {
	t.Helper()
	var s registration.AgentSettings
	fs := pflag.NewFlagSet("fleet-controller", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	s.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return s
}

// agentDeploymentJSON is the agent Deployment the manager would install
// with s, as JSON (what agentConfigHash hashes).
func agentDeploymentJSON(t *testing.T, s registration.AgentSettings) (*appsv1.Deployment, string) {
	t.Helper()
	objs, err := registration.AgentObjects(registration.AgentManifest{Namespace: "cattle-fleet-system",
		Image: "ghcr.io/fleetgo/fleet-agent:v0.1.0", CheckinInterval: 15 * time.Minute, Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(objs)
	if err != nil {
		t.Fatal(err)
	}
	return objs[len(objs)-1].(*appsv1.Deployment), string(b)
}

// TestControllerChartPassesAgentSettings: Rancher's
// agentImage.imagePullPolicy, agent.replicas,
// agent.reconciler.workers.bundledeployment and agent.leaderElection reach
// every fleet-controller (shards import their clusters too) as the
// --agent-* flags it defines, also as Rancher values files write them
// (numbers, workers as a string). With the chart's defaults, or a values
// file without agent, the agent objects the controller builds are those
// of a controller without these settings, so that an upgrade redeploys no
// imported agent.
func TestControllerChartPassesAgentSettings(t *testing.T) {
	_, unset := agentDeploymentJSON(t, registration.AgentSettings{})
	for _, values := range []string{"", "agent: null\n", "agentImage: {imagePullPolicy: \"\"}\n"} {
		deps := renderDeployments(t, charts.Controller, yamlValues(t, values))
		s := agentSettingsArgs(t, container(t, deps["fleet-controller"]).Args)
		if _, got := agentDeploymentJSON(t, s); got != unset {
			t.Errorf("values %q: settings %+v change the agent objects:\n%s\n%s", values, s, got, unset)
		}
	}

	const rancher = `agentImage: {imagePullPolicy: Always}
agent:
  replicas: 2
  reconciler: {workers: {bundledeployment: "20", drift: "10"}}
  leaderElection: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}
shards: [{id: s1}]
`
	want := registration.AgentSettings{ImagePullPolicy: corev1.PullAlways, Replicas: 2, Workers: 20,
		LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, RetryPeriod: 5 * time.Second}
	deps := renderDeployments(t, charts.Controller, yamlValues(t, rancher))
	for _, name := range []string{"fleet-controller", "fleet-controller-shard-s1"} {
		if got := agentSettingsArgs(t, container(t, deps[name]).Args); got != want {
			t.Errorf("%s: agent settings %+v, want %+v", name, got, want)
		}
	}
	dep, _ := agentDeploymentJSON(t, want)
	c := dep.Spec.Template.Spec.Containers[0]
	env := envOf(c)
	if *dep.Spec.Replicas != 2 || c.ImagePullPolicy != corev1.PullAlways || env["BUNDLEDEPLOYMENT_RECONCILER_WORKERS"] != "20" ||
		env["CATTLE_ELECTION_LEASE_DURATION"] != "1m0s" || env["CATTLE_ELECTION_RENEW_DEADLINE"] != "40s" || env["CATTLE_ELECTION_RETRY_PERIOD"] != "5s" {
		t.Errorf("agent deployment: replicas %d, imagePullPolicy %q, env %v", *dep.Spec.Replicas, c.ImagePullPolicy, env)
	}
}

// TestControllerChartRefusesBadAgentSettings: a value fleet-controller
// could not take fails the install with the value named, instead of a
// fleet-controller that refuses to start.
func TestControllerChartRefusesBadAgentSettings(t *testing.T) {
	for values, want := range map[string]string{
		"agentImage: {imagePullPolicy: always}\n":                 `agentImage.imagePullPolicy "always"`,
		"agent: {replicas: 0}\n":                                  `agent.replicas "0"`,
		"agent: {reconciler: {workers: {bundledeployment: x}}}\n": `agent.reconciler.workers.bundledeployment "x"`,
		"agent: {leaderElection: {retryPeriod: ten}}\n":           `agent.leaderElection.retryPeriod "ten"`,
	} {
		_, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system", Values: yamlValues(t, values)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("render with %q: err = %v, want one naming %s", values, err, want)
		}
	}
}
