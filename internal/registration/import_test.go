package registration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestManagerInitiated imports down[1] from a kubeconfig Secret, checks what
// the manager applied there, then runs the agent against it; the agent
// renews its credential on a short schedule and keeps checking in with the
// renewed one.
func TestManagerInitiated(t *testing.T) {
	ctx := context.Background()
	d := down[1]
	kc, err := os.ReadFile(d.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "my-cluster-kubeconfig", Namespace: workspace},
		Data: map[string][]byte{"value": kc}}); err != nil {
		t.Fatal(err)
	}
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "imported", Namespace: workspace, Labels: map[string]string{"env": "dev"}},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "my-cluster-kubeconfig"}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cluster imported", func() error {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cluster.Status.Conditions, fleet.ConditionImported) {
			return fmt.Errorf("conditions %+v", cluster.Status.Conditions)
		}
		return nil
	})
	if cluster.Spec.ClientID == "" || cluster.Status.AgentDeployedGeneration == nil || cluster.Status.APIServerURL != up.Config.Host {
		t.Errorf("after import: clientID=%q agentDeployedGeneration=%v apiServerURL=%q", cluster.Spec.ClientID, cluster.Status.AgentDeployedGeneration, cluster.Status.APIServerURL)
	}
	const ns = fleet.DefaultSystemNamespace
	boot := &corev1.Secret{}
	if err := d.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: register.BootstrapSecretName}, boot); err != nil {
		t.Fatalf("bootstrap secret downstream: %v", err)
	}
	if b, err := register.ParseBootstrap(boot.Data); err != nil || b.TokenName != "import-token-imported" || b.ClusterNamespace != workspace {
		t.Errorf("bootstrap secret: %v %+v", err, b)
	}
	cm := &corev1.ConfigMap{}
	if err := d.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: register.ConfigMapName}, cm); err != nil {
		t.Fatalf("configmap downstream: %v", err)
	}
	var cfg register.AgentConfig
	if err := json.Unmarshal([]byte(cm.Data["config"]), &cfg); err != nil || cfg.ClientID != cluster.Spec.ClientID {
		t.Errorf("configmap config %q: %v", cm.Data["config"], err)
	}
	dep := &appsv1.Deployment{}
	if err := d.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleet-agent"}, dep); err != nil {
		t.Fatalf("agent deployment downstream: %v", err)
	}
	if err := d.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleet-agent"}, &corev1.ServiceAccount{}); err != nil {
		t.Errorf("agent service account downstream: %v", err)
	}

	// The agent (in-process instead of the Deployment, same code path).
	startAgent(t, d, ns, func(o *agent.Options) { o.RenewFraction = 2e-6 }) // ~5s of a 30-day token
	got := waitRegistered(t, cluster.Spec.ClientID, workspace)
	if got.Name != "imported" {
		t.Errorf("agent registered to %s, want imported", got.Name)
	}

	t.Run("credential renewed and used", func(t *testing.T) {
		_, data := agentConfig(t, d, ns)
		first := string(data[register.KeyKubeconfig])
		eventually(t, "renewed credential stored", func() error {
			_, now := agentConfig(t, d, ns)
			if string(now[register.KeyKubeconfig]) == first {
				return fmt.Errorf("credential not renewed yet")
			}
			return nil
		})
		renewed, _ := agentConfig(t, d, ns)
		if err := clientFor(t, renewed).List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(got.Status.Namespace)); err != nil {
			t.Errorf("renewed credential does not work: %v", err)
		}
		c := &fleet.Cluster{}
		_ = up.Client.Get(ctx, client.ObjectKeyFromObject(got), c)
		seen := c.Status.Agent.LastSeen
		eventually(t, "check-in continues after renewal", func() error {
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(got), c); err != nil {
				return err
			}
			if !c.Status.Agent.LastSeen.After(seen.Time) {
				return fmt.Errorf("lastSeen not advancing")
			}
			return nil
		})
	})
}

// TestImportErrors: a bad or unreachable kubeconfig is a condition.
func TestImportErrors(t *testing.T) {
	ctx := context.Background()
	unreachable := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	for name, value := range map[string]string{"garbage": "this is not a kubeconfig: [", "unreachable": unreachable} {
		if err := up.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kc", Namespace: workspace},
			Data: map[string][]byte{"value": []byte(value)}}); err != nil {
			t.Fatal(err)
		}
		if err := up.Client.Create(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workspace},
			Spec: fleet.ClusterSpec{KubeConfigSecret: name + "-kc"}}); err != nil {
			t.Fatal(err)
		}
	}
	for name, reason := range map[string]string{"garbage": registration.ReasonBadKubeconfig, "unreachable": registration.ReasonUnreachable} {
		eventually(t, name+" import condition", func() error {
			c := &fleet.Cluster{}
			if err := up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: name}, c); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reason {
				return fmt.Errorf("conditions %+v", c.Status.Conditions)
			}
			if c.Status.Namespace == "" {
				return fmt.Errorf("cluster namespace missing")
			}
			return nil
		})
	}
}

// TestLocalBootstrap: fleet-local, Cluster local and ClusterGroup default
// exist without any registration step, and the local agent is installed.
func TestLocalBootstrap(t *testing.T) {
	ctx := context.Background()
	eventually(t, "local cluster", func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKey{Namespace: fleet.BootstrapNamespace, Name: fleet.LocalClusterName}, c); err != nil {
			return err
		}
		if c.Status.Namespace == "" || !meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConditionImported) {
			return fmt.Errorf("local cluster status %+v", c.Status)
		}
		return nil
	})
	g := &fleet.ClusterGroup{}
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: fleet.BootstrapNamespace, Name: fleet.DefaultClusterGroup}, g); err != nil {
		t.Fatal(err)
	}
	if g.Spec.Selector == nil || g.Spec.Selector.MatchLabels["name"] != "local" {
		t.Errorf("default group selector %+v", g.Spec.Selector)
	}
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemNamespace, Name: "fleet-agent"}, &appsv1.Deployment{}); err != nil {
		t.Errorf("local agent deployment: %v", err)
	}
}
