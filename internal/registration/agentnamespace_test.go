package registration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
)

// TestAgentNamespaceMove imports down[1] into one agent namespace, then
// changes spec.agentNamespace: the installed agent is not moved (the agent
// of another namespace could not manage the releases it deployed).
// Nothing is installed in the new namespace, the old agent's objects stay
// as they are, and the Cluster says why (Imported stays True, reason
// AgentNamespaceChangeRefused, and a Warning Event). Set back, the Cluster
// is Imported again without the agent being installed again.
func TestAgentNamespaceMove(t *testing.T) {
	ctx := context.Background()
	d := down[1]
	const oldNS, newNS = "move-old", "move-new"
	createKubeconfigSecret(t, d, workspace, "move-kubeconfig")
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "move", Namespace: workspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "move-kubeconfig", AgentNamespace: oldNS}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	waitImported(t, cluster)
	agentDeployment(t, d, oldNS)
	waitDeployedNamespace(t, cluster, oldNS)
	before := oldAgentObjects(t, d, oldNS)
	hash := cluster.Status.AgentConfigHash

	editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.AgentNamespace = newNS })
	eventually(t, "namespace change refused", func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != registration.ReasonAgentNamespaceChangeRefused ||
			cond.ObservedGeneration != cluster.Generation || !strings.Contains(cond.Message, "keeps running in namespace "+oldNS) ||
			!strings.Contains(cond.Message, "set spec.agentNamespace back to "+oldNS) {
			return fmt.Errorf("imported condition %+v", cond)
		}
		if c.Status.AgentDeployedNamespace != oldNS {
			return fmt.Errorf("status.agentDeployedNamespace %q, want %q", c.Status.AgentDeployedNamespace, oldNS)
		}
		return nil
	})
	waitEvent(t, up, workspace, registration.ReasonAgentNamespaceChangeRefused, "keeps running in namespace "+oldNS)
	// A bump of redeployAgentGeneration waits too: the refusal comes first.
	editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.RedeployAgentGeneration++ })
	waitCondition(t, cluster, registration.ReasonAgentNamespaceChangeRefused)
	if err := d.Client.Get(ctx, client.ObjectKey{Namespace: newNS, Name: "fleet-agent"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("agent Deployment in the new namespace %s: want none, got %v", newNS, err)
	}
	assertUnchanged(t, d, before)

	// Set back: Imported again, nothing installed anew.
	editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.AgentNamespace = oldNS; s.RedeployAgentGeneration-- })
	waitCondition(t, cluster, registration.ReasonImported)
	c := &fleet.Cluster{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
		t.Fatal(err)
	}
	if c.Status.AgentConfigHash != hash || c.Status.AgentDeployedNamespace != oldNS {
		t.Errorf("status after setting the namespace back: hash %q (was %q), agentDeployedNamespace %q", c.Status.AgentConfigHash, hash, c.Status.AgentDeployedNamespace)
	}
	assertUnchanged(t, d, before)
}

// oldAgentObjects reads the agent's Deployment, ConfigMap and
// ServiceAccount in ns of d.
func oldAgentObjects(t *testing.T, d *testenv.Cluster, ns string) []client.Object {
	t.Helper()
	objs := []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns}},
	}
	for _, o := range objs {
		if err := d.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatalf("%T %s: %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	return objs
}

// assertUnchanged fails unless each of objs is still in d, with the same
// UID and resourceVersion: neither removed nor applied again.
func assertUnchanged(t *testing.T, d *testenv.Cluster, objs []client.Object) {
	t.Helper()
	for _, o := range objs {
		now := o.DeepCopyObject().(client.Object)
		if err := d.Client.Get(context.Background(), client.ObjectKeyFromObject(o), now); err != nil {
			t.Errorf("%T %s of the installed agent: %v", o, client.ObjectKeyFromObject(o), err)
			continue
		}
		if now.GetUID() != o.GetUID() || now.GetResourceVersion() != o.GetResourceVersion() {
			t.Errorf("%T %s of the installed agent changed: uid %s rv %s, was uid %s rv %s", o, client.ObjectKeyFromObject(o),
				now.GetUID(), now.GetResourceVersion(), o.GetUID(), o.GetResourceVersion())
		}
	}
}

// waitCondition waits until cluster's Imported condition is True with
// reason at cluster's current generation.
func waitCondition(t *testing.T, cluster *fleet.Cluster, reason string) {
	t.Helper()
	eventually(t, "imported condition "+reason, func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != reason || cond.ObservedGeneration != cluster.Generation {
			return fmt.Errorf("imported condition %+v, want True, %s at generation %d", cond, reason, cluster.Generation)
		}
		return nil
	})
}

// waitDeployedNamespace waits until cluster records ns as the namespace
// of the agent the manager installed.
func waitDeployedNamespace(t *testing.T, cluster *fleet.Cluster, ns string) {
	t.Helper()
	eventually(t, "status.agentDeployedNamespace "+ns, func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		if c.Status.AgentDeployedNamespace != ns {
			return fmt.Errorf("status.agentDeployedNamespace %q", c.Status.AgentDeployedNamespace)
		}
		return nil
	})
}
