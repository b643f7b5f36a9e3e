package registration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestAgentNamespaceMoveUnrecorded: an agent installed by a version that
// did not record status.agentDeployedNamespace (only the namespace the
// agent reports at check-in, status.agent.namespace) is not moved either
// when spec.agentNamespace changes: refused, nothing installed in the new
// namespace. Set back, the namespace the agent reports is recorded.
func TestAgentNamespaceMoveUnrecorded(t *testing.T) {
	ctx := context.Background()
	d := down[1]
	const oldNS, newNS = "legacy-old", "legacy-new"
	createKubeconfigSecret(t, d, imageWorkspace, "legacy-kubeconfig")
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "legacy-move", Namespace: imageWorkspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "legacy-kubeconfig", AgentNamespace: oldNS}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	opts := registration.Options{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData}
	stop := startWorkspaceManager(t, opts)
	waitImported(t, cluster)
	waitDeployedNamespace(t, cluster, oldNS)
	before := oldAgentObjects(t, d, oldNS)
	stop()

	// As an older version left it: no record, the agent's check-in only.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		c.Status.AgentDeployedNamespace = ""
		c.Status.Agent.Namespace = oldNS
		return up.Client.Status().Update(ctx, c)
	}); err != nil {
		t.Fatal(err)
	}
	editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.AgentNamespace = newNS })
	startWorkspaceManager(t, opts)
	eventually(t, "namespace change refused", func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
		if cond == nil || cond.Reason != registration.ReasonAgentNamespaceChangeRefused || cond.ObservedGeneration != cluster.Generation ||
			!strings.Contains(cond.Message, "keeps running in namespace "+oldNS) {
			return fmt.Errorf("imported condition %+v", cond)
		}
		return nil
	})
	waitEvent(t, up, imageWorkspace, registration.ReasonAgentNamespaceChangeRefused, "keeps running in namespace "+oldNS)
	if err := d.Client.Get(ctx, client.ObjectKey{Namespace: newNS, Name: "fleet-agent"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("agent Deployment in the new namespace %s: want none, got %v", newNS, err)
	}
	assertUnchanged(t, d, before)

	editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.AgentNamespace = oldNS })
	waitCondition(t, cluster, registration.ReasonImported)
	waitDeployedNamespace(t, cluster, oldNS)
	assertUnchanged(t, d, before)
}
