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
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/helmop"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// TestHelmOpKeepResourcesOnDelete: a HelmOp deleted with keepResources
// deletes its Bundle only once every BundleDeployment has keepResources in
// its options and the agent deployed them, since the agent decides from
// the release it last deployed whether to keep the objects. No agent runs
// here: the test plays it by writing the BundleDeployment status. Two
// ways the Bundle would otherwise still say false: keepResources set and
// the HelmOp deleted at once, before any build; and keepResources set
// while the chart repository fails, so no build carries it.
func TestHelmOpKeepResourcesOnDelete(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failRepo bool
	}{
		{name: "deleted at once", failRepo: false},
		{name: "chart repository failing", failRepo: true},
	} {
		t.Run(tc.name, func(t *testing.T) { testKeepOnDelete(t, tc.failRepo) })
	}
}

func testKeepOnDelete(t *testing.T, failRepo bool) {
	ctx := context.Background()
	ns := newNamespace(t, "keep")
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "app", "1.0.0"))
	keepCluster(t, ns, "down", map[string]string{"env": "keep"})

	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: "app",
				Helm:             &fleet.HelmOptions{Repo: repo.URL, Chart: "app", Version: "1.0.0"},
			},
			Targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "keep"}}}},
		}},
	}
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	// Deployed by the agent without keepResources: its release says
	// uninstall on deletion.
	var first string
	fleettest.Eventually(t, timeout, func() error {
		bd, err := keepDeployment(ctx, ns, "app")
		if err != nil {
			return err
		}
		first = bd.Spec.DeploymentID
		return nil
	})
	playAgent(t, ns, "app")

	if failRepo {
		// The spec change is built (no polling), and fails.
		repo.Close()
		patchOp(t, ns, "app", func(o *fleet.HelmOp) { o.Spec.KeepResources = true })
		// The build of keepResources failed: the Bundle still says false.
		fleettest.Eventually(t, timeout, func() error {
			got := getOp(t, ns, "app")
			c := condition(got, fleet.ConditionReady)
			if c == nil || c.Reason != helmop.ReasonBuildFailed || c.ObservedGeneration != got.Generation {
				return fmt.Errorf("ready = %+v, generation %d", c, got.Generation)
			}
			return nil
		})
		if b := bundleOf(t, ns, "app"); b == nil || b.Spec.KeepResources {
			t.Fatalf("bundle %+v: want it without keepResources", b)
		}
	} else {
		patchOp(t, ns, "app", func(o *fleet.HelmOp) { o.Spec.KeepResources = true })
	}
	if err := env.Client.Delete(ctx, getOp(t, ns, "app")); err != nil {
		t.Fatal(err)
	}

	// The deletion waits, saying why, while the deployment with
	// keepResources is not deployed by the agent.
	fleettest.Eventually(t, timeout, func() error {
		bd, err := keepDeployment(ctx, ns, "app")
		if err != nil {
			return err
		}
		if !bd.Spec.Options.KeepResources || bd.Spec.DeploymentID == first {
			return fmt.Errorf("deployment %s without keepResources", bd.Spec.DeploymentID)
		}
		got := getOp(t, ns, "app")
		for typ, want := range map[string]metav1.ConditionStatus{
			fleet.ConditionReady: metav1.ConditionFalse, fleet.ConditionReconciling: metav1.ConditionTrue,
		} {
			c := condition(got, typ)
			if c == nil || c.Status != want || c.Reason != helmop.ReasonKeepingResources || !strings.Contains(c.Message, "keepResources") {
				return fmt.Errorf("%s = %+v", typ, c)
			}
		}
		return nil
	})
	fleettest.Consistently(t, 2*time.Second, func() error {
		if b := bundleOf(t, ns, "app"); b == nil || b.DeletionTimestamp != nil || !b.Spec.KeepResources {
			return fmt.Errorf("bundle deleted or without keepResources before the agent deployed keepResources: %+v", b)
		}
		_, err := keepDeployment(ctx, ns, "app")
		return err
	})

	// The agent deploys keepResources: the Bundle and the HelmOp go.
	playAgent(t, ns, "app")
	fleettest.Eventually(t, timeout, func() error {
		if b := bundleOf(t, ns, "app"); b != nil {
			return fmt.Errorf("bundle still there")
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &fleet.HelmOp{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("helmop: %v", err)
		}
		return nil
	})
}

// keepCluster registers a Cluster in ns, seen by its agent just now, with
// its own cluster namespace for the BundleDeployments.
func keepCluster(t *testing.T, ns, name string, lbls map[string]string) {
	t.Helper()
	ctx := context.Background()
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}}
	if err := env.Client.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	cns := names.ClusterNamespace(ns, name)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cns}}); err != nil {
		t.Fatal(err)
	}
	c.Status.Namespace = cns
	c.Status.Agent.LastSeen = metav1.Now()
	if err := env.Client.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// keepDeployment is the one BundleDeployment of the HelmOp's Bundle.
func keepDeployment(ctx context.Context, ns, bundle string) (*fleet.BundleDeployment, error) {
	var list fleet.BundleDeploymentList
	if err := env.Client.List(ctx, &list, client.MatchingLabels{fleet.BundleLabel: bundle, fleet.BundleNamespaceLabel: ns}); err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("%d deployments of bundle %s/%s", len(list.Items), ns, bundle)
	}
	return &list.Items[0], nil
}

// playAgent does what the agent reports after deploying the current
// options of the HelmOp's deployment: it is applied, ready, and a release
// stored.
func playAgent(t *testing.T, ns, bundle string) {
	t.Helper()
	ctx := context.Background()
	bd, err := keepDeployment(ctx, ns, bundle)
	if err != nil {
		t.Fatal(err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(bd), bd); err != nil {
			return err
		}
		bd.Status.AppliedDeploymentID, bd.Status.Ready, bd.Status.NonModified = bd.Spec.DeploymentID, true, true
		bd.Status.Release = "app/" + bundle + ":1"
		return env.Client.Status().Update(ctx, bd)
	})
	if err != nil {
		t.Fatal(err)
	}
}
