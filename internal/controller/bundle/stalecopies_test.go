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
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// TestStaleCopiesWarning: an agent that deployed a bundle but could not
// delete copies of downstreamResources that left the list reports
// Deployed=True with reason StaleCopiesNotDeleted (the test writes that
// status as the agent does). The Bundle stays Ready, and its Ready
// message, which `kubectl get bundles` shows, names the cluster, the
// reason and the agent's message, until the agent reports the copies
// deleted.
func TestStaleCopiesWarning(t *testing.T) {
	ctx := context.Background()
	const ws = "stalecopies"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "c1", nil, time.Second)
	newCluster(t, ctx, ws, "c2", nil, time.Second)
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}}
	b.Spec.Resources = resources("v: 1\n")
	b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}}
	must(t, env.Client.Create(ctx, b))
	ready := func(wantMsg func(string) error) func() error {
		return func() error {
			got := &fleet.Bundle{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "app"}, got); err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionReady)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != bundle.ReasonReady {
				return fmt.Errorf("ready = %+v", c)
			}
			if got.Status.Display.State != string(fleet.Ready) || got.Status.Display.ReadyClusters != "2/2" {
				return fmt.Errorf("display %+v", got.Status.Display)
			}
			return wantMsg(c.Message)
		}
	}
	eventually(t, 60*time.Second, func() error {
		bds, err := bundleDeployments(ctx, ws, "app")
		if err != nil {
			return err
		}
		if len(bds) != 2 {
			return fmt.Errorf("%d deployments, want 2", len(bds))
		}
		if err := playAgents(ctx, ws, "app", nil, nil); err != nil {
			return err
		}
		return ready(func(msg string) error {
			if msg != "" {
				return fmt.Errorf("ready message %q, want none", msg)
			}
			return nil
		})()
	})

	bds, err := bundleDeployments(ctx, ws, "app")
	must(t, err)
	bd := bds["c1"]
	const agentMsg = "deployed, but copies of downstreamResources no longer listed could not be deleted (retried): secret app-ns/creds: forbidden"
	setDeployed := func(reason, msg string) {
		update(t, ctx, bd, true, func() {
			meta.SetStatusCondition(&bd.Status.Conditions, metav1.Condition{
				Type: fleet.ConditionDeployed, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: bd.Generation})
		})
	}
	setDeployed(bundledeployment.ReasonStaleCopies, agentMsg)
	want := "StaleCopiesNotDeleted(1) [Cluster " + ws + "/c1: " + agentMsg + "]"
	eventually(t, 30*time.Second, ready(func(msg string) error {
		if msg != want {
			return fmt.Errorf("ready message %q, want %q", msg, want)
		}
		return nil
	}))

	// The agent deleted the copies: the warning goes.
	setDeployed("Deployed", "")
	eventually(t, 30*time.Second, ready(func(msg string) error {
		if strings.Contains(msg, "StaleCopiesNotDeleted") || msg != "" {
			return fmt.Errorf("ready message %q, want none", msg)
		}
		return nil
	}))
}
