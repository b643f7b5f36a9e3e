package registration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// chartDefaultAgentSettings are the settings the fleet chart's default
// values give fleet-controller (agentImage.imagePullPolicy and agent.*).
var chartDefaultAgentSettings = AgentSettings{ImagePullPolicy: corev1.PullIfNotPresent, Replicas: 1, Workers: 50,
	LeaseDuration: 30 * time.Second, RenewDeadline: 25 * time.Second, RetryPeriod: 10 * time.Second}

// TestAgentConfigHashAgentSettingsDefaults: the chart's default agent
// settings yield the very agentConfigHash of a manager without them (the
// options zeroed, which build the objects of the manager before these
// settings existed), so that upgrading the chart with its defaults
// redeploys no imported agent; each non-default setting moves the hash,
// so that the agents are installed again with it.
func TestAgentConfigHashAgentSettingsDefaults(t *testing.T) {
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws"}, Spec: fleet.ClusterSpec{ClientID: "id", KubeConfigSecret: "kc"}}
	hash := func(s AgentSettings) string {
		t.Helper()
		o := Options{APIServerURL: "https://up:6443", AgentImage: "example.com/fleet-agent:v1", Agent: s}
		o.Defaults()
		r := &ClusterReconciler{reconcilerBase: reconcilerBase{Opts: o}}
		h, err := r.agentConfigHash(cluster)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	zero := hash(AgentSettings{})
	if got := hash(chartDefaultAgentSettings); got != zero {
		t.Errorf("hash with the chart's default agent settings %s, want the one without settings %s", got, zero)
	}
	for name, edit := range map[string]func(*AgentSettings){
		"imagePullPolicy Always": func(s *AgentSettings) { s.ImagePullPolicy = corev1.PullAlways },
		"replicas 2":             func(s *AgentSettings) { s.Replicas = 2 },
		"workers 10":             func(s *AgentSettings) { s.Workers = 10 },
		"leaseDuration 40s":      func(s *AgentSettings) { s.LeaseDuration = 40 * time.Second },
		"renewDeadline 20s":      func(s *AgentSettings) { s.RenewDeadline = 20 * time.Second },
		"retryPeriod 5s":         func(s *AgentSettings) { s.RetryPeriod = 5 * time.Second },
	} {
		s := chartDefaultAgentSettings
		edit(&s)
		if hash(s) == zero {
			t.Errorf("%s: hash unchanged, the agents would not be installed again", name)
		}
	}
}

// TestAgentObjectsAgentSettings: each non-default setting reaches the
// agent Deployment as the fleet-agent chart passes it (replicas,
// imagePullPolicy, BUNDLEDEPLOYMENT_RECONCILER_WORKERS and
// CATTLE_ELECTION_*, before the Cluster's agentEnvVars, and left out for a
// name those set, so that they override them); the defaults add nothing.
func TestAgentObjectsAgentSettings(t *testing.T) {
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws"},
		Spec: fleet.ClusterSpec{AgentEnvVars: []corev1.EnvVar{{Name: "USER_VAR", Value: "x"}}}}
	deployment := func(s AgentSettings) (*appsv1.Deployment, string) {
		t.Helper()
		objs, err := AgentObjects(AgentManifest{Namespace: "cattle-fleet-system", Image: "example.com/fleet-agent:v1",
			CheckinInterval: 15 * time.Minute, Cluster: cluster, Settings: s})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(objs)
		if err != nil {
			t.Fatal(err)
		}
		return objs[len(objs)-1].(*appsv1.Deployment), string(b)
	}
	_, zero := deployment(AgentSettings{})
	if _, got := deployment(chartDefaultAgentSettings); got != zero {
		t.Errorf("objects with the chart's defaults differ from those without settings:\n%s\n%s", got, zero)
	}
	dep, _ := deployment(AgentSettings{ImagePullPolicy: corev1.PullNever, Replicas: 3, Workers: 7,
		LeaseDuration: time.Minute, RenewDeadline: 45 * time.Second, RetryPeriod: 15 * time.Second})
	if got := *dep.Spec.Replicas; got != 3 {
		t.Errorf("replicas %d, want 3", got)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("imagePullPolicy %q, want Never", c.ImagePullPolicy)
	}
	var names []string
	env := map[string]string{}
	for _, e := range c.Env {
		names = append(names, e.Name)
		env[e.Name] = e.Value
	}
	for k, want := range map[string]string{"BUNDLEDEPLOYMENT_RECONCILER_WORKERS": "7", "CATTLE_ELECTION_LEASE_DURATION": "1m0s",
		"CATTLE_ELECTION_RENEW_DEADLINE": "45s", "CATTLE_ELECTION_RETRY_PERIOD": "15s"} {
		if env[k] != want {
			t.Errorf("env %s=%q, want %q", k, env[k], want)
		}
	}
	if names[len(names)-1] != "USER_VAR" {
		t.Errorf("env order %v: the Cluster's agentEnvVars come last, to override", names)
	}

	// A name the Cluster sets too is the Cluster's alone: a name twice
	// would make server-side apply refuse the Deployment.
	cluster.Spec.AgentEnvVars = []corev1.EnvVar{{Name: "BUNDLEDEPLOYMENT_RECONCILER_WORKERS", Value: "20"},
		{Name: "CHECKIN_INTERVAL", Value: "1m"}, {Name: "USER_VAR", Value: "x"}}
	dep, _ = deployment(AgentSettings{Workers: 7})
	count := map[string]int{}
	env = map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		count[e.Name]++
		env[e.Name] = e.Value
	}
	for k, want := range map[string]string{"BUNDLEDEPLOYMENT_RECONCILER_WORKERS": "20", "CHECKIN_INTERVAL": "1m", "USER_VAR": "x"} {
		if count[k] != 1 || env[k] != want {
			t.Errorf("env %s %d times, value %q: want once, the Cluster's %q", k, count[k], env[k], want)
		}
	}
	if count["NAMESPACE"] != 1 || count["POD_NAME"] != 1 {
		t.Errorf("env %v: the manager's variables the Cluster does not set are kept", count)
	}
}

// TestAgentSettingsValidate: settings the agent could not run with are
// refused with the setting named; unset timings count as the agent's
// defaults.
func TestAgentSettingsValidate(t *testing.T) {
	for _, s := range []AgentSettings{{}, chartDefaultAgentSettings, {ImagePullPolicy: corev1.PullAlways, Replicas: 3, Workers: 1},
		{LeaseDuration: time.Minute, RenewDeadline: 50 * time.Second, RetryPeriod: 20 * time.Second}} {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	for want, s := range map[string]AgentSettings{
		`"always"`:             {ImagePullPolicy: "always"},
		"replicas -1":          {Replicas: -1},
		"workers -2":           {Workers: -2},
		"must not be negative": {RetryPeriod: -time.Second},
		"have 20s, 25s, 10s":   {LeaseDuration: 20 * time.Second},
		"have 30s, 25s, 25s":   {RetryPeriod: 25 * time.Second},
		"have 30s, 12s, 10s":   {RenewDeadline: 12 * time.Second},
	} {
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: error %v, want one with %q", s, err, want)
		}
	}
}
