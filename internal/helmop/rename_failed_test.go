package helmop_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/bundlereader"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
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
	ns := newNamespace(t, "renfail")
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "renamed", "1.0.0"))
	keepCluster(t, ns, "down", map[string]string{"env": "renfail"})
	cns := names.ClusterNamespace(ns, "down")
	startAgent(t, cns)
	appNS := ns + "-app"
	const opName = "my.app"
	oldName := names.HelmReleaseName(opName)

	// What an earlier version wrote for HelmOp my.app, deployed.
	spec := renameSpec(repo.URL, appNS, "renfail")
	old, err := bundlereader.ReadHelmOp(ctx, oldName, spec.DeepCopy(), bundlereader.Options{
		Namespace: ns, Labels: map[string]string{fleet.HelmOpLabel: opName},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitRelease(t, cns, oldName, appNS+"/"+oldName+":1")
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: appNS, Name: "renamed"}, cm); err != nil {
		t.Fatal(err)
	}

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
		c := condition(getOp(t, ns, opName), fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "region") {
			return fmt.Errorf("helmop ready = %+v", c)
		}
		return nil
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
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
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
	waitRelease(t, cns, opName, appNS+"/"+oldName+":2")
	fleettest.Eventually(t, timeout, func() error {
		var list fleet.BundleList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{fleet.HelmOpLabel: opName}); err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Name != opName {
			return fmt.Errorf("%d bundles, want only %s", len(list.Items), opName)
		}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: cns, Name: oldName}, &fleet.BundleDeployment{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("old bundledeployment: %v", err)
		}
		if c := condition(getOp(t, ns, opName), fleet.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("helmop ready = %+v", c)
		}
		return nil
	})
	after := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: appNS, Name: "renamed"}, after); err != nil {
		t.Fatal(err)
	}
	if after.UID != cm.UID {
		t.Fatalf("the app's ConfigMap was deleted and created again (uid %s, was %s)", after.UID, cm.UID)
	}
	waitRelease(t, cns, opName, appNS+"/"+oldName+":2")
}
