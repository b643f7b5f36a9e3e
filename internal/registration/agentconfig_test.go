package registration_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
)

// imageWorkspace is left to managers a test starts itself, each with its
// own agent image (TestImportedAgentFollowsManagerImage): the shared
// manager does not see it.
const imageWorkspace = "ws-image"

// TestImportedAgentFollowsCluster imports down[0] with spec.privateRepoURL
// and checks the agent image comes from that registry; then that
// unrelated Cluster changes (a label, a heartbeat, template values) leave
// the downstream agent alone, and that a change of agentTolerations is
// applied there without a redeployAgentGeneration bump.
//
// Whether the manager applied the agent again is seen on the Deployment's
// replicas: the test scales it to 0 with its own field manager, and only
// an apply of the agent (server-side, forcing its fields) sets 1 again.
func TestImportedAgentFollowsCluster(t *testing.T) {
	ctx := context.Background()
	d := down[0]
	const agentNS = "agent-follows-cluster"
	createKubeconfigSecret(t, d, workspace, "follow-kubeconfig")
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "follow", Namespace: workspace, Labels: map[string]string{"env": "test"}},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "follow-kubeconfig", AgentNamespace: agentNS, PrivateRepoURL: "registry.internal:5000"}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	waitImported(t, cluster)
	dep := agentDeployment(t, d, agentNS)
	if got, want := dep.Spec.Template.Spec.Containers[0].Image, "registry.internal:5000/fleetgo/fleet-agent:latest"; got != want {
		t.Errorf("agent image %q, want %q (privateRepoURL in place of the registry of %s)", got, want, registration.DefaultAgentImage)
	}
	firstHash := cluster.Status.AgentConfigHash
	if firstHash == "" {
		t.Error("status.agentConfigHash not set after the import")
	}
	scaleToZero(t, d, dep)

	t.Run("unrelated changes do not redeploy", func(t *testing.T) {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			t.Fatal(err)
		}
		beat := cluster.DeepCopy()
		beat.Status.Agent.LastSeen = metav1.Now()
		if err := up.Client.Status().Patch(ctx, beat, client.MergeFrom(cluster)); err != nil {
			t.Fatal(err)
		}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			t.Fatal(err)
		}
		base := cluster.DeepCopy()
		cluster.Labels["team"] = "platform"
		cluster.Spec.TemplateValues = &fleet.GenericMap{Data: map[string]interface{}{"region": "eu"}}
		if err := up.Client.Patch(ctx, cluster, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
		// The manager has seen the changes when it reports the new
		// generation (it reads the Cluster with its labels as a whole).
		gen := cluster.Generation
		eventually(t, "cluster reconciled after the changes", func() error {
			c := &fleet.Cluster{}
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
				return err
			}
			if cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionProcessed); cond == nil || cond.ObservedGeneration != gen {
				return fmt.Errorf("processed condition %+v, want generation %d", cond, gen)
			}
			return nil
		})
		if got := agentDeployment(t, d, agentNS); ptr.Deref(got.Spec.Replicas, -1) != 0 {
			t.Errorf("agent re-applied (replicas %v) after a label, heartbeat and templateValues change", ptr.Deref(got.Spec.Replicas, -1))
		}
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			t.Fatal(err)
		}
		if c.Status.AgentConfigHash != firstHash {
			t.Errorf("agentConfigHash changed from %s to %s", firstHash, c.Status.AgentConfigHash)
		}
	})

	t.Run("agentTolerations change redeploys", func(t *testing.T) {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			t.Fatal(err)
		}
		redeployGen := cluster.Spec.RedeployAgentGeneration
		base := cluster.DeepCopy()
		tol := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "fleet", Effect: corev1.TaintEffectNoSchedule}
		cluster.Spec.AgentTolerations = []corev1.Toleration{tol}
		if err := up.Client.Patch(ctx, cluster, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
		eventually(t, "agent re-applied with the toleration", func() error {
			got := agentDeployment(t, d, agentNS)
			if !slices.Contains(got.Spec.Template.Spec.Tolerations, tol) {
				return fmt.Errorf("tolerations %+v", got.Spec.Template.Spec.Tolerations)
			}
			if ptr.Deref(got.Spec.Replicas, -1) != 1 {
				return fmt.Errorf("replicas %v, want 1 from the manager's apply", ptr.Deref(got.Spec.Replicas, -1))
			}
			return nil
		})
		c := &fleet.Cluster{}
		eventually(t, "new agentConfigHash recorded", func() error {
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
				return err
			}
			if c.Status.AgentConfigHash == firstHash || c.Status.AgentConfigHash == "" {
				return fmt.Errorf("agentConfigHash %q", c.Status.AgentConfigHash)
			}
			return nil
		})
		if !meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConditionImported) || ptr.Deref(c.Status.AgentDeployedGeneration, -1) != redeployGen {
			t.Errorf("after the redeploy: imported %+v, agentDeployedGeneration %v, want %d", c.Status.Conditions, c.Status.AgentDeployedGeneration, redeployGen)
		}
	})
}

// TestImportedAgentFollowsManagerImage: a manager started with a new agent
// image (what `helm upgrade` of the fleet chart does) installs it on the
// clusters it imported before, without a redeployAgentGeneration bump.
func TestImportedAgentFollowsManagerImage(t *testing.T) {
	ctx := context.Background()
	d := down[1]
	const agentNS = "agent-follows-image"
	createKubeconfigSecret(t, d, imageWorkspace, "image-kubeconfig")
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "image", Namespace: imageWorkspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "image-kubeconfig", AgentNamespace: agentNS}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}

	const v1, v2 = "registry.example.com/fleetgo/fleet-agent:v1", "registry.example.com/fleetgo/fleet-agent:v2"
	stop := startWorkspaceManager(t, registration.Options{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData, AgentImage: v1})
	waitImported(t, cluster)
	if got := agentDeployment(t, d, agentNS).Spec.Template.Spec.Containers[0].Image; got != v1 {
		t.Fatalf("agent image %q, want %q", got, v1)
	}
	stop()

	startWorkspaceManager(t, registration.Options{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData, AgentImage: v2})
	eventually(t, "agent upgraded to the new image", func() error {
		if got := agentDeployment(t, d, agentNS).Spec.Template.Spec.Containers[0].Image; got != v2 {
			return fmt.Errorf("agent image %q, want %q", got, v2)
		}
		return nil
	})
	c := &fleet.Cluster{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.RedeployAgentGeneration != 0 || ptr.Deref(c.Status.AgentDeployedGeneration, -1) != 0 {
		t.Errorf("redeployAgentGeneration %d, agentDeployedGeneration %v: the upgrade needs no bump", c.Spec.RedeployAgentGeneration, c.Status.AgentDeployedGeneration)
	}
}

// startWorkspaceManager runs a manager for imageWorkspace only, with opts
// (2 workers unless set): what a test needs that restarts the manager with
// another agent image, URL or CA. stop ends it and waits until it has
// stopped; it also runs when the test ends.
func startWorkspaceManager(t *testing.T, opts registration.Options) (stop func()) {
	t.Helper()
	if opts.Workers == 0 {
		opts.Workers = 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, err := startManager(ctx, opts, map[string]cache.Config{imageWorkspace: {}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// createKubeconfigSecret stores d's kubeconfig in Secret ns/name, key
// "value", as a user importing d does.
func createKubeconfigSecret(t *testing.T, d *testenv.Cluster, ns, name string) {
	t.Helper()
	kc, err := os.ReadFile(d.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Client.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data: map[string][]byte{"value": kc}}); err != nil {
		t.Fatal(err)
	}
}

// waitImported waits for Imported=True on cluster and leaves its state in it.
func waitImported(t *testing.T, cluster *fleet.Cluster) {
	t.Helper()
	eventually(t, "cluster imported", func() error {
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cluster.Status.Conditions, fleet.ConditionImported) {
			return fmt.Errorf("conditions %+v", cluster.Status.Conditions)
		}
		return nil
	})
}

// agentDeployment is the fleet-agent Deployment in ns of d.
func agentDeployment(t *testing.T, d *testenv.Cluster, ns string) *appsv1.Deployment {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := d.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fleet-agent"}, dep); err != nil {
		t.Fatalf("agent deployment %s/fleet-agent: %v", ns, err)
	}
	return dep
}

// scaleToZero sets the agent Deployment's replicas to 0 as another field
// manager would; only an apply of the agent by the manager sets 1 again.
func scaleToZero(t *testing.T, d *testenv.Cluster, dep *appsv1.Deployment) {
	t.Helper()
	base := dep.DeepCopy()
	dep.Spec.Replicas = ptr.To[int32](0)
	if err := d.Client.Patch(context.Background(), dep, client.MergeFrom(base), client.FieldOwner("test-operator")); err != nil {
		t.Fatal(err)
	}
}
