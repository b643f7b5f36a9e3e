package registration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestImportedAgentSettings: a manager started with Rancher's agent
// settings (agentImage.imagePullPolicy, agent.replicas,
// agent.reconciler.workers.bundledeployment, agent.leaderElection) other
// than the defaults installs the imported agent with them, read back from
// the downstream API server; started again with the chart's defaults, it
// installs the agent as it did before these settings existed (the API
// server then defaults imagePullPolicy for the tagged image).
func TestImportedAgentSettings(t *testing.T) {
	ctx := context.Background()
	d := down[1]
	const agentNS, image = "agent-settings", "example.com/fleet-agent:v1"
	createKubeconfigSecret(t, d, imageWorkspace, "settings-kubeconfig")
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "agent-settings", Namespace: imageWorkspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "settings-kubeconfig", AgentNamespace: agentNS}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	opts := func(s registration.AgentSettings) registration.Options {
		return registration.Options{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData, AgentImage: image, Agent: s}
	}

	stop := startWorkspaceManager(t, opts(registration.AgentSettings{ImagePullPolicy: corev1.PullAlways, Replicas: 2, Workers: 10,
		LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, RetryPeriod: 5 * time.Second}))
	waitImported(t, cluster)
	dep := agentDeployment(t, d, agentNS)
	if got := ptr.Deref(dep.Spec.Replicas, 0); got != 2 {
		t.Errorf("agent replicas %d, want 2", got)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("agent imagePullPolicy %q, want Always", c.ImagePullPolicy)
	}
	want := map[string]string{"BUNDLEDEPLOYMENT_RECONCILER_WORKERS": "10", "CATTLE_ELECTION_LEASE_DURATION": "1m0s",
		"CATTLE_ELECTION_RENEW_DEADLINE": "40s", "CATTLE_ELECTION_RETRY_PERIOD": "5s"}
	env := containerEnv(c)
	for k, v := range want {
		if env[k] != v {
			t.Errorf("agent env %s=%q, want %q", k, env[k], v)
		}
	}
	stop()

	startWorkspaceManager(t, opts(registration.AgentSettings{ImagePullPolicy: corev1.PullIfNotPresent, Replicas: 1, Workers: 50,
		LeaseDuration: 30 * time.Second, RenewDeadline: 25 * time.Second, RetryPeriod: 10 * time.Second}))
	eventually(t, "agent back at the defaults", func() error {
		dep := agentDeployment(t, d, agentNS)
		if got := ptr.Deref(dep.Spec.Replicas, 0); got != 1 {
			return fmt.Errorf("replicas %d, want 1", got)
		}
		c := dep.Spec.Template.Spec.Containers[0]
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			return fmt.Errorf("imagePullPolicy %q, want the API server's default for %s, IfNotPresent", c.ImagePullPolicy, image)
		}
		env := containerEnv(c)
		for k := range want {
			if v, ok := env[k]; ok {
				return fmt.Errorf("env %s=%q still set, want it left to the agent's default", k, v)
			}
		}
		return nil
	})
}

// containerEnv is c's env by name.
func containerEnv(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// TestImportedAgentEnvOverride: a Cluster's agentEnvVars entry with the
// name of a variable the manager writes (workers 10) replaces it: the
// import succeeds (a name twice would make server-side apply refuse the
// Deployment) and the downstream agent has the variable once, with the
// Cluster's value.
func TestImportedAgentEnvOverride(t *testing.T) {
	ctx := context.Background()
	d := down[1]
	const agentNS, name = "agent-env-override", "BUNDLEDEPLOYMENT_RECONCILER_WORKERS"
	createKubeconfigSecret(t, d, imageWorkspace, "env-override-kubeconfig")
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "agent-env-override", Namespace: imageWorkspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "env-override-kubeconfig", AgentNamespace: agentNS,
			AgentEnvVars: []corev1.EnvVar{{Name: name, Value: "20"}}}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	startWorkspaceManager(t, registration.Options{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData,
		AgentImage: "example.com/fleet-agent:v1", Agent: registration.AgentSettings{Workers: 10}})
	waitImported(t, cluster)
	var values []string
	for _, e := range agentDeployment(t, d, agentNS).Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			values = append(values, e.Value)
		}
	}
	if len(values) != 1 || values[0] != "20" {
		t.Errorf("agent env %s values %q, want exactly one, the Cluster's 20", name, values)
	}
}
