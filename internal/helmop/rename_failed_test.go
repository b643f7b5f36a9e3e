package helmop_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestHelmOpRenamedBundleKeptWhileTargetFails: the Bundle named after the
// HelmOp is processed but its target fails in the cluster where the
// Bundle of the older name deploys (a values template needing a
// templateValues key the cluster lacks). That cluster gets no new
// BundleDeployment, yet it is one the new Bundle wants: the old Bundle,
// and the release a real agent installed for it, stay, and the HelmOp's
// status shows the error. Once the cluster has the value, the new Bundle
// deploys there and the hand-over completes, the release moved and
// upgraded rather than installed again.
func TestHelmOpRenamedBundleKeptWhileTargetFails(t *testing.T) {
	ctx := context.Background()
	r := deployOldNamed(t, "renfail")
	ns, cns, appNS, opName, oldName, spec := r.ns, r.cns, r.appNS, r.opName, r.oldName, r.spec

	spec.Helm.Values = &fleet.GenericMap{Data: map[string]interface{}{"region": "${ .ClusterValues.region }"}}
	op := &fleet.HelmOp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: opName}, Spec: fleet.HelmOpSpec{BundleSpec: spec}}
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	// The new Bundle is processed, its target in "down" failed.
	fleettest.Eventually(t, timeout, func() error {
		b := &fleet.Bundle{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: opName}, b); err != nil {
			return err
		}
		if b.Status.ObservedGeneration != b.Generation || b.Status.Summary.ErrApplied != 1 {
			return fmt.Errorf("bundle %s: observed %d of %d, summary %+v", opName, b.Status.ObservedGeneration, b.Generation, b.Status.Summary)
		}
		got := getOp(t, ns, opName)
		c := condition(got, fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "region") {
			return fmt.Errorf("helmop ready = %+v", c)
		}
		// The status says the old Bundle is kept, and why.
		return r.keptShown(got, "bundle "+opName+" has a target error for cluster "+ns+"/down")
	})
	fleettest.Consistently(t, 8*time.Second, func() error {
		b := &fleet.Bundle{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: oldName}, b); err != nil || b.DeletionTimestamp != nil {
			return fmt.Errorf("old bundle deleted while the new one's target fails: %v", err)
		}
		bd := &fleet.BundleDeployment{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: cns, Name: oldName}, bd); err != nil || bd.DeletionTimestamp != nil {
			return fmt.Errorf("old bundledeployment deleted while the new one's target fails: %v", err)
		}
		return nil
	})
	waitRelease(t, cns, oldName, appNS+"/"+oldName+":1")

	// The cluster gets the value: the hand-over completes.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &fleet.Cluster{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "down"}, c); err != nil {
			return err
		}
		c.Spec.TemplateValues = &fleet.GenericMap{Data: map[string]interface{}{"region": "eu"}}
		return env.Client.Update(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	r.waitHandedOver(t)
}
