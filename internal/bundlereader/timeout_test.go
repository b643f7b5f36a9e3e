package bundlereader

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/target"
)

// TestNegativeHelmTimeoutTurnsWaitOff: as in Rancher Fleet, a negative
// helm.timeoutSeconds in a targetCustomization or a targets[] entry is
// accepted and turns the root's timeout off for the clusters it matches
// (their BundleDeployment options have none, so the agent does not wait),
// while other clusters keep the root's. A negative root timeout is no
// timeout, stored as 0. A negative maxHistory is still refused.
func TestNegativeHelmTimeoutTurnsWaitOff(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"fleet.yaml": `helm:
  timeoutSeconds: 300
targets:
- name: fast
  clusterSelector: {matchLabels: {speed: fast}}
  helm: {timeoutSeconds: -1}
targetCustomizations:
- name: edge
  clusterSelector: {matchLabels: {site: edge}}
  helm: {timeoutSeconds: -60}
- name: slow
  clusterSelector: {matchLabels: {site: slow}}
  helm: {timeoutSeconds: 900}
`,
	})
	b, err := readOne(t, dir, Options{Targets: []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}})
	if err != nil {
		t.Fatalf("a negative timeoutSeconds in targets/targetCustomizations is refused: %v", err)
	}
	if h := b.Spec.Helm; h == nil || h.TimeoutSeconds != 300 {
		t.Fatalf("bundle helm options %+v, want timeoutSeconds 300", h)
	}

	clusters := []target.ClusterInfo{
		{Cluster: testCluster("fast", "speed", "fast")},
		{Cluster: testCluster("edge", "site", "edge")},
		{Cluster: testCluster("slow", "site", "slow")},
		{Cluster: testCluster("plain", "site", "dc")},
	}
	got, err := target.Compute(target.Input{Bundle: b, ManifestID: "s-1", Clusters: clusters})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"fast": 0, "edge": 0, "slow": 900, "plain": 300}
	seen := map[string]bool{}
	for _, tg := range got {
		if tg.Err != nil {
			t.Fatalf("%s: %v", tg.Cluster.Name, tg.Err)
		}
		seen[tg.Cluster.Name] = true
		timeout := 0
		if tg.Options.Helm != nil {
			timeout = tg.Options.Helm.TimeoutSeconds
		}
		if w, ok := want[tg.Cluster.Name]; !ok || timeout != w {
			t.Errorf("cluster %s (target %s, customizations %v): timeoutSeconds %d, want %d", tg.Cluster.Name, tg.TargetName, tg.Customizations, timeout, w)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("targeted %v, want every cluster of %v", seen, want)
	}

	// A negative root timeout: accepted, no timeout.
	dir = writeRepo(t, map[string]string{
		"cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"fleet.yaml": "helm:\n  timeoutSeconds: -1\n",
	})
	b, err = readOne(t, dir, Options{})
	if err != nil {
		t.Fatalf("a negative root timeoutSeconds is refused: %v", err)
	}
	if h := b.Spec.Helm; h == nil || h.TimeoutSeconds != 0 {
		t.Errorf("bundle helm options %+v, want timeoutSeconds 0 (no timeout)", h)
	}

	for _, tc := range []struct{ fleetYAML, key string }{
		{fleetYAML: "helm:\n  maxHistory: -1\n", key: "helm.maxHistory"},
		{fleetYAML: "targetCustomizations:\n- name: x\n  clusterGroup: g\n  helm: {maxHistory: -2}\n", key: "targetCustomizations[0].helm.maxHistory"},
		{fleetYAML: "targets:\n- name: x\n  clusterGroup: g\n  helm: {timeoutSeconds: -1, maxHistory: -2}\n", key: "targets[0].helm.maxHistory"},
	} {
		dir := writeRepo(t, map[string]string{
			"cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
			"fleet.yaml": tc.fleetYAML,
		})
		if _, err := readOne(t, dir, Options{}); err == nil || !strings.Contains(err.Error(), tc.key+" must not be negative") {
			t.Errorf("%q: error %v, want one naming %s", tc.fleetYAML, err, tc.key)
		}
	}
}

func testCluster(name, key, value string) *fleet.Cluster {
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "test", Labels: map[string]string{key: value}}}
	c.Status.Namespace = names.ClusterNamespace(c.Namespace, name)
	return c
}
