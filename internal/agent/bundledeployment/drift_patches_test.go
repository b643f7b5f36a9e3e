package bundledeployment_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

const patchedDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: patched-app
  labels: {app: patched}
spec:
  replicas: 1
  selector:
    matchLabels: {app: patched}
  template:
    metadata:
      labels: {app: patched}
    spec:
      containers:
      - name: c
        image: registry.example/app:1
`

// A comparePatches replace (here of the replicas an autoscaler sets) is
// applied to both sides before they are compared: scaling the Deployment
// is not drift, so it is neither reported nor, with correctDrift, rolled
// back; other edits still are drift.
func TestComparePatchReplaceIsNotDrift(t *testing.T) {
	ctx := context.Background()
	const ns = "cp-ns"
	b := bundle{name: "cp-replace", files: map[string]string{"d.yaml": patchedDeployment}, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace: ns,
		Diff: &fleet.DiffOptions{ComparePatches: []fleet.ComparePatch{{
			APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "patched-app",
			Operations: []fleet.Operation{{Op: "replace", Path: "/spec/replicas", Value: "0"}},
		}}},
	}}
	id := put(t, b)
	waitState(t, b.name, id, fleet.NotReady) // no deployment controller here
	edit := func(replicas int32, label string) {
		t.Helper()
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d := &appsv1.Deployment{}
			if err := down.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "patched-app"}, d); err != nil {
				return err
			}
			d.Spec.Replicas = &replicas
			d.Labels["app"] = label
			return down.Client.Update(ctx, d)
		}))
	}
	liveReplicas := func() int32 {
		t.Helper()
		d := &appsv1.Deployment{}
		must(t, down.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "patched-app"}, d))
		return *d.Spec.Replicas
	}

	// Scaled and relabelled: only the label is drift.
	edit(3, "edited")
	eventually(t, "label reported, replicas not", func() error {
		bd := getBD(t, b.name)
		if len(bd.Status.ModifiedStatus) != 1 || !strings.Contains(bd.Status.ModifiedStatus[0].Patch, `"labels"`) {
			return fmt.Errorf("modifiedStatus %+v", bd.Status.ModifiedStatus)
		}
		if strings.Contains(bd.Status.ModifiedStatus[0].Patch, "replicas") {
			t.Fatalf("replicas reported as drift: %s", bd.Status.ModifiedStatus[0].Patch)
		}
		return nil
	})

	// Label restored, still scaled: not modified.
	edit(3, "patched")
	eventually(t, "not modified while scaled", func() error {
		if bd := getBD(t, b.name); !bd.Status.NonModified || len(bd.Status.ModifiedStatus) != 0 {
			return fmt.Errorf("nonModified %v, modifiedStatus %+v", bd.Status.NonModified, bd.Status.ModifiedStatus)
		}
		return nil
	})

	// correctDrift on: the evaluation of that generation finds nothing to
	// correct, and the scale stays.
	b.correctDrift = &fleet.CorrectDrift{Enabled: true}
	put(t, b)
	eventually(t, "correctDrift generation evaluated", func() error {
		bd := getBD(t, b.name)
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionMonitored)
		if c == nil || c.ObservedGeneration != bd.Generation || !bd.Status.NonModified {
			return fmt.Errorf("monitored %+v, nonModified %v", c, bd.Status.NonModified)
		}
		return nil
	})
	if r := liveReplicas(); r != 3 {
		t.Fatalf("replicas rolled back to %d", r)
	}
}
