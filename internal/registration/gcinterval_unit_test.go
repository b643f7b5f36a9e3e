package registration

import (
	"encoding/json"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestAgentObjectsGCInterval: the agent objects name
// garbageCollectionInterval (ConfigMap and pod template) only for an
// interval other than the agent's default; unset or 15m yields the very
// objects, and agentConfigHash, of a manager that knew no such setting,
// so that upgrading redeploys no imported agent.
func TestAgentObjectsGCInterval(t *testing.T) {
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws"}, Spec: fleet.ClusterSpec{ClientID: "id"}}
	manifest := func(gc time.Duration) AgentManifest {
		return AgentManifest{Namespace: "cattle-fleet-system", ClientID: "id", Image: "img", CheckinInterval: 15 * time.Minute,
			Values: Values{APIServerURL: "https://up"}, Cluster: cluster, GarbageCollectionInterval: gc}
	}
	objects := func(gc time.Duration) (string, *corev1.ConfigMap, *appsv1.Deployment) {
		t.Helper()
		objs, err := AgentObjects(manifest(gc))
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(objs)
		if err != nil {
			t.Fatal(err)
		}
		var cm *corev1.ConfigMap
		var dep *appsv1.Deployment
		for _, o := range objs {
			switch o := o.(type) {
			case *corev1.ConfigMap:
				cm = o
			case *appsv1.Deployment:
				dep = o
			}
		}
		return string(b), cm, dep
	}
	unset, _, _ := objects(0)
	for _, tc := range []struct {
		name       string
		gc         time.Duration
		wantConfig string // "" for the objects of unset
	}{
		{name: "unset", gc: 0},
		{name: "default", gc: 15 * time.Minute},
		{name: "negative", gc: -time.Minute},
		{name: "1h", gc: time.Hour, wantConfig: "1h0m0s"},
		{name: "90s", gc: 90 * time.Second, wantConfig: "1m30s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cm, dep := objects(tc.gc)
			if tc.wantConfig == "" {
				if got != unset {
					t.Errorf("objects differ from those without an interval:\n%s\n%s", got, unset)
				}
				return
			}
			var cfg AgentConfig
			if err := json.Unmarshal([]byte(cm.Data["config"]), &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.GarbageCollectionInterval != tc.wantConfig {
				t.Errorf("config garbageCollectionInterval %q, want %q", cfg.GarbageCollectionInterval, tc.wantConfig)
			}
			if a := dep.Spec.Template.Annotations[AgentGCIntervalAnnotation]; a != tc.wantConfig {
				t.Errorf("pod template annotation %q, want %q (the agent restarts only on a pod template change)", a, tc.wantConfig)
			}
		})
	}
}

// TestAgentConfigHashGCInterval: the manager's interval moves the hash
// (which re-applies the agent) unless it is unset or the default.
func TestAgentConfigHashGCInterval(t *testing.T) {
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws"}, Spec: fleet.ClusterSpec{ClientID: "id", KubeConfigSecret: "kc"}}
	hash := func(gc time.Duration) string {
		t.Helper()
		o := Options{APIServerURL: "https://up:6443", GarbageCollectionInterval: gc}
		o.Defaults()
		r := &ClusterReconciler{reconcilerBase: reconcilerBase{Opts: o}}
		h, err := r.agentConfigHash(cluster)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	unset := hash(0)
	if got := hash(15 * time.Minute); got != unset {
		t.Errorf("hash with 15m %s, want the hash without an interval %s", got, unset)
	}
	if hash(time.Hour) == unset {
		t.Error("hash with 1h equals the one without an interval: the agent would not be re-applied")
	}
}
