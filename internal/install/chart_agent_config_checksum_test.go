package install_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// agentConfigChecksum is the checksum/config annotation of the fleet-agent
// pod template that `helm template` (the real helm CLI) renders with the
// agent chart's required values plus set.
func agentConfigChecksum(t *testing.T, set ...string) string {
	t.Helper()
	args := append([]string{"template", "fleet-agent", "charts/fleet-agent", "-n", "cattle-fleet-system"}, agentArgs...)
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	obj, ok := byKey(t, out)["Deployment/cattle-fleet-system/fleet-agent"]
	if !ok {
		t.Fatalf("helm template %v renders no Deployment fleet-agent", set)
	}
	annotations, _, err := unstructured.NestedStringMap(obj.Object, "spec", "template", "metadata", "annotations")
	if err != nil {
		t.Fatal(err)
	}
	sum := annotations["checksum/config"]
	if len(sum) != 64 {
		t.Fatalf("helm template %v: pod template annotation checksum/config = %q, want a sha256", set, sum)
	}
	return sum
}

// TestAgentChartRollsOnConfigChange: the agent reads ConfigMap fleet-agent
// only when it starts, so its pod template carries a checksum of that
// ConfigMap. `helm upgrade` with another garbageCollectionInterval (or
// other config: labels, clientID, agentTLSMode) changes the pod template,
// which rolls the agent; an upgrade with the same values, or with a value
// that is not in the ConfigMap, leaves the pod template, and the agent,
// alone.
func TestAgentChartRollsOnConfigChange(t *testing.T) {
	base := agentConfigChecksum(t, "garbageCollectionInterval=15m")
	if again := agentConfigChecksum(t, "garbageCollectionInterval=15m"); again != base {
		t.Fatalf("same values, checksum/config %s then %s: every upgrade would restart the agent", base, again)
	}
	if other := agentConfigChecksum(t, "garbageCollectionInterval=15m", "agent.replicas=2"); other != base {
		t.Errorf("agent.replicas (not in the ConfigMap) changed checksum/config from %s to %s", base, other)
	}
	for _, set := range []string{"garbageCollectionInterval=1h", "labels.env=dev", "clientID=abc", "agentTLSMode=strict"} {
		if got := agentConfigChecksum(t, "garbageCollectionInterval=15m", set); got == base {
			t.Errorf("--set %s left checksum/config at %s: the agent would keep its old config", set, got)
		}
	}
}
