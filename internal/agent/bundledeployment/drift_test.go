package bundledeployment_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

const driftFiles = `apiVersion: v1
kind: ConfigMap
metadata:
  name: drifty
data:
  a: "1"
---
apiVersion: v1
kind: Service
metadata:
  name: svc
spec:
  selector: {app: x}
  ports:
  - port: 80
    targetPort: 8080
`

// Editing or deleting a deployed object shows Modified with the diff (and
// server-side defaults such as a Service's clusterIP are not drift); with
// correctDrift the agent restores them.
func TestDriftDetectionAndCorrection(t *testing.T) {
	ctx := context.Background()
	b := bundle{name: "drift", files: map[string]string{"all.yaml": driftFiles}, opts: fleet.BundleDeploymentOptions{DefaultNamespace: "drift-ns"}}
	id := put(t, b)
	waitState(t, "drift", id, fleet.Ready) // Ready = not modified, despite the server's defaults

	cm, err := configMap(t, "drift-ns", "drifty")
	must(t, err)
	cm.Data["a"] = "2"
	must(t, down.Client.Update(ctx, cm))
	eventually(t, "modified with diff", func() error {
		bd := getBD(t, "drift")
		if bundledeployment.State(bd) != fleet.Modified || len(bd.Status.ModifiedStatus) != 1 {
			return fmt.Errorf("status %+v", bd.Status)
		}
		m := bd.Status.ModifiedStatus[0]
		if m.Kind != "ConfigMap" || m.Name != "drifty" || m.Patch != `{"data":{"a":"1"}}` {
			return fmt.Errorf("modified %+v", m)
		}
		return nil
	})

	must(t, down.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "drift-ns", Name: "svc"}}))
	eventually(t, "missing service reported", func() error {
		bd := getBD(t, "drift")
		for _, m := range bd.Status.ModifiedStatus {
			if m.Kind == "Service" && m.Create {
				return nil
			}
		}
		return fmt.Errorf("modified %+v", bd.Status.ModifiedStatus)
	})

	b.correctDrift = &fleet.CorrectDrift{Enabled: true}
	put(t, b)
	waitState(t, "drift", id, fleet.Ready)
	wantData(t, "drift-ns", "drifty", "a", "1")
	must(t, down.Client.Get(ctx, client.ObjectKey{Namespace: "drift-ns", Name: "svc"}, &corev1.Service{}))

	// Later drift is corrected as it happens.
	cm, err = configMap(t, "drift-ns", "drifty")
	must(t, err)
	cm.Data["a"] = "3"
	must(t, down.Client.Update(ctx, cm))
	wantData(t, "drift-ns", "drifty", "a", "1")
	waitState(t, "drift", id, fleet.Ready)
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 1
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: c
        image: registry.example/app:1
`

// Readiness comes from kstatus: the Deployment is NotReady until its status
// says it is available. There is no kubelet or deployment controller in the
// test cluster, so the test patches the Deployment's status itself, standing
// in for them. B depends on A and deploys only once A is Ready.
func TestReadinessAndDependsOn(t *testing.T) {
	ctx := context.Background()
	idA := put(t, bundle{name: "a", files: map[string]string{"d.yaml": deployment}, opts: fleet.BundleDeploymentOptions{DefaultNamespace: "dep-ns"}})
	idB := put(t, bundle{
		name: "b", files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: after-a\n"},
		opts:      fleet.BundleDeploymentOptions{DefaultNamespace: "dep-ns"},
		dependsOn: []fleet.BundleRef{{Name: "a"}},
	})
	bdA := waitState(t, "a", idA, fleet.NotReady)
	if len(bdA.Status.NonReadyStatus) != 1 || bdA.Status.NonReadyStatus[0].Kind != "Deployment" {
		t.Fatalf("nonReadyStatus %+v", bdA.Status.NonReadyStatus)
	}
	if c := meta.FindStatusCondition(bdA.Status.Conditions, fleet.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "deployment dep-ns/app") {
		t.Fatalf("ready condition %+v", c)
	}
	eventually(t, "b waits for a", func() error {
		bd := getBD(t, "b")
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionReady)
		if c == nil || c.Reason != bundledeployment.ReasonWaitingDependency || bd.Status.AppliedDeploymentID != "" {
			return fmt.Errorf("status %+v", bd.Status)
		}
		return nil
	})
	// Stays waiting (nothing deployed) while A is not ready.
	time.Sleep(2 * time.Second)
	if _, err := configMap(t, "dep-ns", "after-a"); !apierrors.IsNotFound(err) {
		t.Fatalf("b deployed before a was ready: %v", err)
	}

	// Stand in for the deployment controller: report the rollout complete.
	d := &appsv1.Deployment{}
	must(t, down.Client.Get(ctx, client.ObjectKey{Namespace: "dep-ns", Name: "app"}, d))
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
		},
	}
	must(t, down.Client.Status().Update(ctx, d))
	waitState(t, "a", idA, fleet.Ready)
	waitState(t, "b", idB, fleet.Ready)
	must(t, func() error { _, err := configMap(t, "dep-ns", "after-a"); return err }())
}

// A new version applies over a field someone else changed (the agent is the
// authority on what it deployed; no server-side apply conflict).
func TestUpgradeOverDrift(t *testing.T) {
	ctx := context.Background()
	b := bundle{name: "overdrift", files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: od\ndata:\n  a: \"1\"\n"},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "od-ns"}}
	id := put(t, b)
	waitState(t, "overdrift", id, fleet.Ready)
	cm, err := configMap(t, "od-ns", "od")
	must(t, err)
	cm.Data["a"] = "2"
	must(t, down.Client.Update(ctx, cm, client.FieldOwner("kubectl-edit")))
	waitState(t, "overdrift", id, fleet.Modified)
	b.files["cm.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: od\ndata:\n  a: \"5\"\n"
	id2 := put(t, b)
	waitState(t, "overdrift", id2, fleet.Ready)
	wantData(t, "od-ns", "od", "a", "5")
}

// correctDrift.force restores by replacing the objects.
func TestCorrectDriftForce(t *testing.T) {
	ctx := context.Background()
	id := put(t, bundle{name: "force", files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: forced-cm\ndata:\n  a: \"1\"\n"},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "force-ns"}, correctDrift: &fleet.CorrectDrift{Enabled: true, Force: true}})
	waitState(t, "force", id, fleet.Ready)
	cm, err := configMap(t, "force-ns", "forced-cm")
	must(t, err)
	cm.Data["a"] = "2"
	must(t, down.Client.Update(ctx, cm))
	wantData(t, "force-ns", "forced-cm", "a", "1")
	must(t, down.Client.Delete(ctx, cm))
	wantData(t, "force-ns", "forced-cm", "a", "1")
	waitState(t, "force", id, fleet.Ready)
}
