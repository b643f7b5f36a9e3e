package registration

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestAgentImage: privateRepoURL takes the place of the registry the
// configured agent image names (ghcr.io, or the chart's
// systemDefaultRegistry), as Rancher Fleet's Resolve does; the repository
// path, tag and digest stay.
func TestAgentImage(t *testing.T) {
	for _, tc := range []struct {
		image, private, want string
	}{
		{image: "ghcr.io/fleetgo/fleet-agent:latest", private: "", want: "ghcr.io/fleetgo/fleet-agent:latest"},
		{image: "ghcr.io/fleetgo/fleet-agent:latest", private: "registry.internal:5000", want: "registry.internal:5000/fleetgo/fleet-agent:latest"},
		// The fleet chart's --agent-image with systemDefaultRegistry (which
		// takes the place of ghcr.io there): that registry is replaced.
		{image: "registry.example.com/fleetgo/fleet-agent:v1", private: "mirror.local", want: "mirror.local/fleetgo/fleet-agent:v1"},
		{image: "registry.internal:5000/fleetgo/fleet-agent:v0.1.0", private: "mirror.local", want: "mirror.local/fleetgo/fleet-agent:v0.1.0"},
		{image: "localhost:5000/fleet-agent:dev", private: "mirror.local", want: "mirror.local/fleet-agent:dev"},
		{image: "localhost/fleet-agent:dev", private: "mirror.local", want: "mirror.local/fleet-agent:dev"},
		// Docker Hub names have no registry component to replace.
		{image: "rancher/fleet-agent:v0.12.0", private: "mirror.local/", want: "mirror.local/rancher/fleet-agent:v0.12.0"},
		{image: "fleet-agent:dev", private: "https://mirror.local", want: "mirror.local/fleet-agent:dev"},
		{image: "ghcr.io/fleetgo/fleet-agent@sha256:0123", private: "mirror.local/fleet", want: "mirror.local/fleet/fleetgo/fleet-agent@sha256:0123"},
		// Already in the private registry: unchanged, not prefixed twice.
		{image: "mirror.local/fleetgo/fleet-agent:v1", private: "mirror.local", want: "mirror.local/fleetgo/fleet-agent:v1"},
	} {
		if got := AgentImage(tc.image, tc.private); got != tc.want {
			t.Errorf("AgentImage(%q, %q) = %q, want %q", tc.image, tc.private, got, tc.want)
		}
	}
}

// TestAgentConfigHash: the hash moves with every setting the agent
// manifest depends on, and stays with what the agent does not depend on
// (labels, template values, pausing, heartbeats), which must not cause a
// redeploy.
func TestAgentConfigHash(t *testing.T) {
	opts := Options{APIServerURL: "https://up:6443", APIServerCA: []byte("ca"), AgentImage: "ghcr.io/fleetgo/fleet-agent:v1"}
	opts.Defaults()
	base := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws", Labels: map[string]string{"env": "dev"}},
		Spec: fleet.ClusterSpec{ClientID: "id", KubeConfigSecret: "kc"}}
	hash := func(o Options, c *fleet.Cluster) string {
		t.Helper()
		r := &ClusterReconciler{reconcilerBase: reconcilerBase{Opts: o}}
		h, err := r.agentConfigHash(c)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	want := hash(opts, base)
	if want == "" || want != hash(opts, base.DeepCopy()) {
		t.Fatalf("hash not stable: %q", want)
	}

	changes := map[string]func(*Options, *fleet.Cluster){
		"agentEnvVars": func(_ *Options, c *fleet.Cluster) {
			c.Spec.AgentEnvVars = []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "http://proxy:3128"}}
		},
		"agentTolerations": func(_ *Options, c *fleet.Cluster) {
			c.Spec.AgentTolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
		},
		"agentAffinity": func(_ *Options, c *fleet.Cluster) {
			c.Spec.AgentAffinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
		},
		"agentResources": func(_ *Options, c *fleet.Cluster) {
			c.Spec.AgentResources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		},
		"hostNetwork": func(_ *Options, c *fleet.Cluster) {
			on := true
			c.Spec.HostNetwork = &on
		},
		"privateRepoURL":         func(_ *Options, c *fleet.Cluster) { c.Spec.PrivateRepoURL = "mirror.local" },
		"agentNamespace":         func(_ *Options, c *fleet.Cluster) { c.Spec.AgentNamespace = "other-agent-ns" },
		"clientID":               func(_ *Options, c *fleet.Cluster) { c.Spec.ClientID = "other" },
		"manager agent image":    func(o *Options, _ *fleet.Cluster) { o.AgentImage = "ghcr.io/fleetgo/fleet-agent:v2" },
		"manager apiServerURL":   func(o *Options, _ *fleet.Cluster) { o.APIServerURL = "https://other:6443" },
		"manager apiServerCA":    func(o *Options, _ *fleet.Cluster) { o.APIServerCA = []byte("other ca") },
		"manager check-in":       func(o *Options, _ *fleet.Cluster) { o.AgentCheckinInterval = time.Minute },
		"agent system namespace": func(o *Options, _ *fleet.Cluster) { o.SystemNamespace = "fleet-system" },
	}
	for name, change := range changes {
		o, c := opts, base.DeepCopy()
		change(&o, c)
		if hash(o, c) == want {
			t.Errorf("changing %s does not change the agent config hash", name)
		}
	}

	same := map[string]func(*fleet.Cluster){
		"labels": func(c *fleet.Cluster) { c.Labels["team"] = "a" },
		"paused": func(c *fleet.Cluster) { c.Spec.Paused = true },
		"templateValues": func(c *fleet.Cluster) {
			c.Spec.TemplateValues = &fleet.GenericMap{Data: map[string]interface{}{"a": "b"}}
		},
		"redeployAgentGeneration": func(c *fleet.Cluster) { c.Spec.RedeployAgentGeneration = 3 },
		"heartbeat":               func(c *fleet.Cluster) { c.Status.Agent.LastSeen = metav1.Now() },
		"status":                  func(c *fleet.Cluster) { c.Status.AgentConfigHash = "x"; c.Status.Namespace = "cluster-ns" },
	}
	for name, change := range same {
		c := base.DeepCopy()
		change(c)
		if hash(opts, c) != want {
			t.Errorf("changing %s changes the agent config hash: it would redeploy the agent", name)
		}
	}
}

// TestImportReason: an imported agent is current only when the generation
// and the configuration hash both match what was installed.
func TestImportReason(t *testing.T) {
	gen := int64(2)
	c := &fleet.Cluster{Spec: fleet.ClusterSpec{RedeployAgentGeneration: 2},
		Status: fleet.ClusterStatus{AgentDeployedGeneration: &gen, AgentConfigHash: "h",
			Conditions: []metav1.Condition{{Type: fleet.ConditionImported, Status: metav1.ConditionTrue}}}}
	if why := importReason(c, "h"); why != "" {
		t.Errorf("current agent: reason %q, want none", why)
	}
	if why := importReason(c, "other"); why == "" {
		t.Error("changed configuration: no redeploy")
	}
	c.Spec.RedeployAgentGeneration = 3
	if why := importReason(c, "h"); why == "" {
		t.Error("bumped redeployAgentGeneration: no redeploy")
	}
}
