package registration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
)

// The managers of this package spread the backfill of agentConfigHash over
// a window no test sees the end of, so that
// TestAgentConfigHashBackfillWaitsItsTurn can tell a staggered install from
// an immediate one without waiting for anything but the manager's own
// reconcile. It is set before TestMain starts them.
func init() { *registration.BackfillSpread = 1000 * time.Hour }

// TestAgentConfigHashBackfillWaitsItsTurn: a Cluster imported by a manager
// that did not record status.agentConfigHash (one upgraded from a version
// without it) is not installed again the moment the new manager looks at
// it, but in its turn within the backfill window (10 minutes in
// production), so that an upgrade does not reinstall every imported agent
// at once. A redeployAgentGeneration bump is not held back by it.
//
// Whether the manager applied the agent again is seen on the Deployment's
// replicas, as in TestImportedAgentFollowsCluster.
func TestAgentConfigHashBackfillWaitsItsTurn(t *testing.T) {
	ctx := context.Background()
	d := down[1]
	const agentNS, secretName = "agent-backfill", "backfill-kubeconfig"
	createKubeconfigSecret(t, d, workspace, secretName)
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "backfill", Namespace: workspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: secretName, AgentNamespace: agentNS}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	waitImported(t, cluster)
	firstHash := cluster.Status.AgentConfigHash
	if firstHash == "" {
		t.Fatal("status.agentConfigHash not set after the import")
	}
	scaleToZero(t, d, agentDeployment(t, d, agentNS))

	// What an older manager left: imported, without a hash.
	base := cluster.DeepCopy()
	cluster.Status.AgentConfigHash = ""
	if err := up.Client.Status().Patch(ctx, cluster, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	// A spec change the hash leaves out makes the manager look at the
	// Cluster now; it has when it reports the new generation (in the same
	// status write as an install would be recorded).
	base = cluster.DeepCopy()
	cluster.Spec.TemplateValues = &fleet.GenericMap{Data: map[string]interface{}{"backfill": "yes"}}
	if err := up.Client.Patch(ctx, cluster, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	gen := cluster.Generation
	c := &fleet.Cluster{}
	eventually(t, "cluster reconciled after the upgrade", func() error {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionProcessed); cond == nil || cond.ObservedGeneration != gen {
			return fmt.Errorf("processed condition %+v, want generation %d", cond, gen)
		}
		return nil
	})
	if got := agentDeployment(t, d, agentNS); ptr.Deref(got.Spec.Replicas, -1) != 0 {
		t.Errorf("agent installed again at once (replicas %v) for a missing agentConfigHash", ptr.Deref(got.Spec.Replicas, -1))
	}
	if c.Status.AgentConfigHash != "" {
		t.Errorf("agentConfigHash %q recorded at once: the agent was installed again", c.Status.AgentConfigHash)
	}

	base = c.DeepCopy()
	c.Spec.RedeployAgentGeneration = 1
	if err := up.Client.Patch(ctx, c, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "agent installed again for the redeploy bump", func() error {
		if got := agentDeployment(t, d, agentNS); ptr.Deref(got.Spec.Replicas, -1) != 1 {
			return fmt.Errorf("replicas %v, want 1 from the manager's apply", ptr.Deref(got.Spec.Replicas, -1))
		}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		if c.Status.AgentConfigHash != firstHash || ptr.Deref(c.Status.AgentDeployedGeneration, -1) != 1 {
			return fmt.Errorf("agentConfigHash %q (want the first import's), agentDeployedGeneration %v",
				c.Status.AgentConfigHash, c.Status.AgentDeployedGeneration)
		}
		return nil
	})
}
