package bundledeployment_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

// A redeploy of the deploymentID already applied that fails (here the
// manager bumped downstreamResourcesGeneration, but the Secret to copy is
// gone upstream) is reported like any failed deploy: status.ready false,
// Ready and Deployed False with the error, state ErrApplied. Reporting the
// cluster Ready would hide that the bundle no longer deploys. What was
// deployed stays, and restoring the source deploys again.
func TestFailedRedeployIsNotReady(t *testing.T) {
	ctx := context.Background()
	src := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "rdf-creds", Namespace: clusterNS},
		StringData: map[string]string{"password": "one"},
	}
	must(t, up.Client.Create(ctx, src))
	id := put(t, bundle{name: "rdf", files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rdf\ndata:\n  a: \"1\"\n"},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "rdf-ns", DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "rdf-creds"}}}})
	waitState(t, "rdf", id, fleet.Ready)

	must(t, up.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rdf-creds", Namespace: clusterNS}}))
	bumpDownstreamGeneration(t, "rdf")
	eventually(t, "failed redeploy reported", func() error {
		bd := getBD(t, "rdf")
		dep := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
		if dep == nil || dep.Status != metav1.ConditionFalse || !strings.Contains(dep.Message, "rdf-creds") {
			return fmt.Errorf("deployed condition %+v", dep)
		}
		if bd.Status.Ready {
			return fmt.Errorf("status.ready still true")
		}
		if meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ConditionReady) {
			return fmt.Errorf("ready condition still true")
		}
		if bd.Status.Display.State != string(fleet.ErrApplied) || bundledeployment.State(bd) != fleet.ErrApplied {
			return fmt.Errorf("display state %q, state %s", bd.Status.Display.State, bundledeployment.State(bd))
		}
		return nil
	})
	// Nothing deployed was removed: the release's ConfigMap and the copy.
	wantData(t, "rdf-ns", "rdf", "a", "1")
	must(t, down.Client.Get(ctx, client.ObjectKey{Namespace: "rdf-ns", Name: "rdf-creds"}, &corev1.Secret{}))

	// The source is back: the retry (backoff) deploys, and Ready follows.
	must(t, up.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "rdf-creds", Namespace: clusterNS},
		StringData: map[string]string{"password": "two"},
	}))
	bd := waitState(t, "rdf", id, fleet.Ready)
	if !bd.Status.Ready || bd.Status.Display.State != string(fleet.Ready) {
		t.Fatalf("after recovery: ready %v, display %+v", bd.Status.Ready, bd.Status.Display)
	}
}

func bumpDownstreamGeneration(t *testing.T, name string) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		bd := getBD(t, name)
		bd.Spec.DownstreamResourcesGeneration++
		return up.Client.Update(context.Background(), bd)
	}))
}

func setPaused(t *testing.T, name string, paused bool) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		bd := getBD(t, name)
		bd.Spec.Paused = paused
		return up.Client.Update(context.Background(), bd)
	}))
}

// When the CRD of custom resources a bundle deployed is deleted downstream
// (the resources go with it), the bundle reports them missing and keeps
// reporting the rest: a kind that no longer maps is absent, not an error
// that freezes the whole status. The agent looks again after the shared
// discovery cache was refreshed (here by another bundle's CRD) and with its
// drift watch built anew (resuming from a pause, as after a restart), so
// the kind really no longer maps when it looks.
func TestDeletedCRDReportsResourcesMissing(t *testing.T) {
	ctx := context.Background()
	files := map[string]string{
		"crd.yaml":   crdYAML("gone.example.com", "Gizmo"),
		"gizmo.yaml": "apiVersion: gone.example.com/v1\nkind: Gizmo\nmetadata:\n  name: gz1\nspec:\n  size: 1\n",
		"cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gz-cm\ndata:\n  a: \"1\"\n",
	}
	id := put(t, bundle{name: "crdgone", files: files, opts: fleet.BundleDeploymentOptions{DefaultNamespace: "crdgone-ns"}})
	waitState(t, "crdgone", id, fleet.Ready)

	setPaused(t, "crdgone", true)
	eventually(t, "drift watch dropped", func() error {
		if n := bundledeployment.WatchedObjects(clusterNS, "crdgone"); n != 0 {
			return fmt.Errorf("still watching %d objects", n)
		}
		return nil
	})
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName("gizmos.gone.example.com")
	must(t, down.Client.Delete(ctx, crd))
	eventually(t, "CRD gone", func() error {
		err := down.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd.DeepCopy())
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
	other := put(t, bundle{name: "crdgone-other", files: map[string]string{"crd.yaml": crdYAML("other.gone.example.com", "Doohickey")},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "crdgone-ns"}})
	waitState(t, "crdgone-other", other, fleet.Ready)

	setPaused(t, "crdgone", false)
	missing := func(bd *fleet.BundleDeployment) map[string]bool {
		out := map[string]bool{}
		for _, m := range bd.Status.ModifiedStatus {
			if m.Create {
				out[m.Kind+"/"+m.Name] = true
			}
		}
		return out
	}
	eventually(t, "custom resource and CRD reported missing", func() error {
		bd := getBD(t, "crdgone")
		m := missing(bd)
		if bundledeployment.State(bd) != fleet.Modified || !m["Gizmo/gz1"] || !m["CustomResourceDefinition/gizmos.gone.example.com"] {
			return fmt.Errorf("state %s, modified %+v", bundledeployment.State(bd), bd.Status.ModifiedStatus)
		}
		if bd.Status.ResourceCounts.Missing != 2 || bd.Status.Display.State != string(fleet.Modified) {
			return fmt.Errorf("counts %+v, display %+v", bd.Status.ResourceCounts, bd.Status.Display)
		}
		return nil
	})

	// The objects that still map are still followed: an edit shows.
	cm, err := configMap(t, "crdgone-ns", "gz-cm")
	must(t, err)
	cm.Data["a"] = "2"
	must(t, down.Client.Update(ctx, cm))
	eventually(t, "edit of the remaining ConfigMap reported", func() error {
		for _, m := range getBD(t, "crdgone").Status.ModifiedStatus {
			if m.Kind == "ConfigMap" && m.Name == "gz-cm" && m.Patch == `{"data":{"a":"1"}}` {
				return nil
			}
		}
		return fmt.Errorf("modified %+v", getBD(t, "crdgone").Status.ModifiedStatus)
	})
}

// dependsOn with both a name and a selector needs a BundleDeployment that
// matches both (as in Rancher Fleet, the name is added to the selector's
// labels): the named bundle without the selected label is no dependency
// that is met, and the dependent waits until the label is there.
func TestDependsOnNameAndSelector(t *testing.T) {
	ctx := context.Background()
	idA := put(t, bundle{name: "dsel-a", files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dsel-a\n"},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "dsel-ns"}})
	waitState(t, "dsel-a", idA, fleet.Ready)
	idB := put(t, bundle{
		name: "dsel-b", files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dsel-b\n"},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "dsel-ns"},
		dependsOn: []fleet.BundleRef{{Name: "dsel-a", Selector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"tier": "db"},
		}}},
	})
	eventually(t, "b waits: a lacks tier=db", func() error {
		bd := getBD(t, "dsel-b")
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionReady)
		if c == nil || c.Reason != bundledeployment.ReasonWaitingDependency || bd.Status.AppliedDeploymentID != "" {
			return fmt.Errorf("status %+v", bd.Status)
		}
		if !strings.Contains(c.Message, "dsel-a") || !strings.Contains(c.Message, "tier=db") {
			return fmt.Errorf("message %q", c.Message)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	if _, err := configMap(t, "dsel-ns", "dsel-b"); !apierrors.IsNotFound(err) {
		t.Fatalf("b deployed although no dependency matches name and selector: %v", err)
	}

	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		bd := getBD(t, "dsel-a")
		bd.Labels["tier"] = "db"
		return up.Client.Update(ctx, bd)
	}))
	waitState(t, "dsel-b", idB, fleet.Ready)
}
