package registration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestAgentCannotRedirectItsNamespace: with its real credential an agent
// may patch its Cluster's status but not update (replace) it, as in
// Rancher Fleet; and when it patches status.namespace to another cluster's
// namespace, the manager sets the field back to the cluster's own
// namespace and says so in a Warning Event (targeting ignores the wrong
// value meanwhile: internal/controller/bundle).
func TestAgentCannotRedirectItsNamespace(t *testing.T) {
	ctx := context.Background()
	v := newToken(t, workspace, "nsredirect-token", time.Hour)
	cfg, ownNS := registerWith(t, v, workspace, "nsredirect-token", "nsredirect-agent")
	_, otherNS := registerWith(t, v, workspace, "nsredirect-token", "nsredirect-other")
	name := names.ClusterNameForClientID("nsredirect-agent")
	if ownNS != names.ClusterNamespace(workspace, name) || otherNS == ownNS {
		t.Fatalf("namespaces %s and %s", ownNS, otherNS)
	}
	agentClient := clientFor(t, cfg)
	key := &fleet.Cluster{}
	key.Namespace, key.Name = workspace, name
	// The agent's grant works (RBAC seen by the authorizer) before a 403
	// is taken for a refusal.
	eventually(t, "patch own cluster status", func() error {
		return agentClient.Status().Patch(ctx, key.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{}}`)))
	})

	cluster := &fleet.Cluster{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(key), cluster); err != nil {
		t.Fatal(err)
	}
	cluster.Status.Namespace = otherNS
	wantForbidden(t, "update own cluster status", agentClient.Status().Update(ctx, cluster))

	patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"namespace":"`+otherNS+`"}}`))
	if err := agentClient.Status().Patch(ctx, key.DeepCopy(), patch); err != nil {
		t.Fatalf("patch own cluster status: %v", err)
	}
	eventually(t, "status.namespace set back", func() error {
		got := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(key), got); err != nil {
			return err
		}
		if got.Status.Namespace != ownNS {
			return fmt.Errorf("status.namespace %q, want %q", got.Status.Namespace, ownNS)
		}
		return nil
	})
	waitEvent(t, up, workspace, registration.ReasonNamespaceRestored, fmt.Sprintf("status.namespace was %q, not the cluster's namespace %s", otherNS, ownNS))
}
