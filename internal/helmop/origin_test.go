package helmop_test

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// TestHelmOpLeavesOtherOriginsBundles: a GitRepo's Bundle that carries a
// HelmOp's label (set by hand, or by a fleet.yaml before the reader
// refused it) is not that HelmOp's: its builds do not prune it, its status
// does not report it and deleting the HelmOp does not delete it. A HelmOp
// cannot claim a GitRepo's label for its own Bundle either, which that
// GitRepo would prune.
func TestHelmOpLeavesOtherOriginsBundles(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "origin")
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "web", "1.0.0"))

	foreign := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "apps-web", Labels: map[string]string{fleet.RepoLabel: "apps", fleet.HelmOpLabel: "web"}},
		Spec: fleet.BundleSpec{
			Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: apps\n"}},
			Targets:   []fleet.BundleTarget{{Name: "none", ClusterName: "nowhere"}},
		},
	}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: fleet.HelmOpSpec{
			BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				Helm: &fleet.HelmOptions{Repo: repo.URL, Chart: "web", Version: "1.0.0"},
			}},
			Labels: map[string]string{fleet.RepoLabel: "apps", "app": "web"},
		},
	}
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	var own fleet.Bundle
	fleettest.Eventually(t, timeout, func() error {
		got := getOp(t, ns, "web")
		if got.Status.Version != "1.0.0" || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("status %+v", got.Status)
		}
		if c := condition(got, fleet.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("accepted = %+v", c)
		}
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &own)
	})
	if _, ok := own.Labels[fleet.RepoLabel]; ok || own.Labels["app"] != "web" || own.Labels[fleet.HelmOpLabel] != "web" {
		t.Errorf("HelmOp bundle labels %v: want app and the HelmOp label, no GitRepo label", own.Labels)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), &fleet.Bundle{}); err != nil {
		t.Fatalf("the GitRepo's bundle after the HelmOp's build: %v", err)
	}

	if err := env.Client.Delete(ctx, op); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(op), &fleet.HelmOp{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("HelmOp still there: %v", err)
		}
		return nil
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), &fleet.Bundle{}); err != nil {
		t.Fatalf("the GitRepo's bundle after the HelmOp was deleted: %v", err)
	}
}
