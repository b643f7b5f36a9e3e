package bundle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// refusedKeepsNothing continues TestConflictingClusterKeepsNoOtherDeployment
// (refused is the Cluster registration refused for NamespaceConflict, nsX
// the owner's namespace, bundle "both" targets both clusters):
//   - a BundleDeployment of bundle "legacy" in nsX labelled for the refused
//     cluster (written before the namespace check existed) is deleted once
//     "legacy" targets only the refused cluster: the owner's agent would
//     run it;
//   - the refused cluster's agent writes nsX into its status.namespace: it
//     gets no deployment there ("legacy" stays without one), the owner's
//     deployment of "both" stays the owner's, and both bundles keep saying
//     registration refused the cluster.
func refusedKeepsNothing(t *testing.T, ctx context.Context, refused *fleet.Cluster, nsX string, ownerOf func(string) (string, error)) {
	t.Helper()
	ws := refused.Namespace
	legacy := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: nsX, Name: "legacy", Labels: map[string]string{
		fleet.BundleLabel: "legacy", fleet.BundleNamespaceLabel: ws,
		fleet.ClusterLabel: refused.Name, fleet.ClusterNamespaceLabel: ws,
	}}}
	legacy.Spec.DeploymentID = "s-legacy:old"
	must(t, env.Client.Create(ctx, legacy))
	bu := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "legacy"}}
	bu.Spec.Resources = resources("kind: ConfigMap\nmetadata:\n  name: legacy\n")
	bu.Spec.Targets = []fleet.BundleTarget{{ClusterName: refused.Name}}
	must(t, env.Client.Create(ctx, bu))
	bundleReadyMentions(t, ctx, ws, "legacy", "cluster "+ws+"/"+refused.Name+": "+refusedMsg)
	gone := func() error {
		if _, err := ownerOf("legacy"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("BundleDeployment legacy in %s (labelled for the refused cluster): %v, want it deleted", nsX, err)
		}
		return nil
	}
	eventually(t, 60*time.Second, gone)

	update(t, ctx, refused, true, func() { refused.Status.Namespace = nsX })
	bundleReadyMentions(t, ctx, ws, "both", "cluster "+ws+"/"+refused.Name+": "+refusedMsg)
	consistently(t, 5*time.Second, func() error {
		if err := gone(); err != nil {
			return err
		}
		if c, err := ownerOf("both"); err != nil || c != conflictOwner {
			return fmt.Errorf("BundleDeployment both in %s for %q (%v), want the owner's", nsX, c, err)
		}
		return nil
	})
	bundleReadyMentions(t, ctx, ws, "legacy", "cluster "+ws+"/"+refused.Name+": "+refusedMsg)
}
