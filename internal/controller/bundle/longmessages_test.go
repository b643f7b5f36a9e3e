package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/summary"
)

// TestLongAgentMessages: agents may write Deployed messages as long as
// the CRD allows (32768 bytes; the test writes them as the agent does).
// The Bundle's Ready message quotes them, cut, so its status writes are
// still accepted and it keeps following its deployments: first three
// warnings, then a failed deploy.
func TestLongAgentMessages(t *testing.T) {
	ctx := context.Background()
	const ws = "longmessages"
	createNamespace(t, ctx, ws, nil)
	clusters := []string{"c1", "c2", "c3"}
	for _, c := range clusters {
		newCluster(t, ctx, ws, c, nil, time.Second)
	}
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}}
	b.Spec.Resources = resources("v: 1\n")
	b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}}
	must(t, env.Client.Create(ctx, b))
	ready := func(status metav1.ConditionStatus, wantMsg func(string) error) func() error {
		return func() error {
			got := &fleet.Bundle{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "app"}, got); err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionReady)
			if c == nil || c.Status != status {
				return fmt.Errorf("ready = %+v", c)
			}
			if len(c.Message) > summary.MaxConditionMessage {
				return fmt.Errorf("ready message is %d bytes, want at most %d", len(c.Message), summary.MaxConditionMessage)
			}
			return wantMsg(c.Message)
		}
	}
	eventually(t, 60*time.Second, func() error {
		if err := playAgents(ctx, ws, "app", nil, nil); err != nil {
			return err
		}
		return ready(metav1.ConditionTrue, func(msg string) error {
			if msg != "" {
				return fmt.Errorf("ready message %q, want none", msg)
			}
			return nil
		})()
	})

	bds, err := bundleDeployments(ctx, ws, "app")
	must(t, err)
	longMsg := strings.Repeat("x", 32768)
	setDeployed := func(cluster string, status metav1.ConditionStatus, reason string) {
		bd := bds[cluster]
		update(t, ctx, bd, true, func() {
			meta.SetStatusCondition(&bd.Status.Conditions, metav1.Condition{
				Type: fleet.ConditionDeployed, Status: status, Reason: reason, Message: longMsg, ObservedGeneration: bd.Generation})
		})
	}
	for _, c := range clusters {
		setDeployed(c, metav1.ConditionTrue, bundledeployment.ReasonStaleCopies)
	}
	eventually(t, 30*time.Second, ready(metav1.ConditionTrue, func(msg string) error {
		if !strings.HasPrefix(msg, "StaleCopiesNotDeleted(3) [Cluster "+ws+"/c1: xxx") || !strings.Contains(msg, "(cut)") {
			return fmt.Errorf("ready message %.200q..., want the three warnings, cut", msg)
		}
		return nil
	}))

	// A deploy fails with a long error: the status still follows.
	setDeployed("c3", metav1.ConditionFalse, "DeployError")
	eventually(t, 30*time.Second, ready(metav1.ConditionFalse, func(msg string) error {
		if !strings.HasPrefix(msg, "ErrApplied(1) [Cluster "+ws+"/c3: xxx") || !strings.Contains(msg, "StaleCopiesNotDeleted(2)") {
			return fmt.Errorf("ready message %.200q..., want the error and two warnings", msg)
		}
		return nil
	}))
}
