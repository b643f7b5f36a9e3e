package registration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
)

// TestImportedAgentGarbageCollectionInterval: a manager started with
// --garbage-collection-interval=1h writes it into the imported agent's
// fleet-agent ConfigMap, where the agent reads it, and into its pod
// template, so that the agent restarts to read it; the Cluster records it
// in status.garbageCollectionInterval. A manager started again without it
// (the chart's default, 15m) takes both out again, so that the agent
// restarts at its default, which the status then records.
func TestImportedAgentGarbageCollectionInterval(t *testing.T) {
	ctx := context.Background()
	d := down[1]
	const agentNS = "agent-gc-interval"
	createKubeconfigSecret(t, d, imageWorkspace, "gc-kubeconfig")
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "gc-interval", Namespace: imageWorkspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "gc-kubeconfig", AgentNamespace: agentNS}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}

	stop := startWorkspaceManager(t, registration.Options{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData, GarbageCollectionInterval: time.Hour})
	waitImported(t, cluster)
	if got := agentGCInterval(t, d, agentNS); got != time.Hour {
		t.Errorf("agent garbage collection interval %v, want 1h from --garbage-collection-interval", got)
	}
	if got := agentDeployment(t, d, agentNS).Spec.Template.Annotations[registration.AgentGCIntervalAnnotation]; got != "1h0m0s" {
		t.Errorf("pod template annotation %s = %q, want 1h0m0s", registration.AgentGCIntervalAnnotation, got)
	}
	if got := cluster.Status.GarbageCollectionInterval; got == nil || got.Duration != time.Hour {
		t.Errorf("status.garbageCollectionInterval %v, want 1h", got)
	}
	stop()

	startWorkspaceManager(t, registration.Options{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData})
	eventually(t, "agent back at the default interval and restarted", func() error {
		if got := agentGCInterval(t, d, agentNS); got != register.DefaultGCInterval {
			return fmt.Errorf("agent garbage collection interval %v, want the default", got)
		}
		if a, ok := agentDeployment(t, d, agentNS).Spec.Template.Annotations[registration.AgentGCIntervalAnnotation]; ok {
			return fmt.Errorf("pod template still has %s=%q: the agent would not restart", registration.AgentGCIntervalAnnotation, a)
		}
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		if got := c.Status.GarbageCollectionInterval; got == nil || got.Duration != register.DefaultGCInterval {
			return fmt.Errorf("status.garbageCollectionInterval %v, want 15m", got)
		}
		return nil
	})
}

// agentGCInterval is the interval the agent in ns of d reads from its
// fleet-agent ConfigMap, through the agent's own parsing.
func agentGCInterval(t *testing.T, d *testenv.Cluster, ns string) time.Duration {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := d.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: register.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	var cfg register.AgentConfig
	if err := json.Unmarshal([]byte(cm.Data["config"]), &cfg); err != nil {
		t.Fatalf("config %q: %v", cm.Data["config"], err)
	}
	gc, err := cfg.GCInterval()
	if err != nil {
		t.Fatal(err)
	}
	return gc
}
