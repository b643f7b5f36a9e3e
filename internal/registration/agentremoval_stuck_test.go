package registration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestAgentLeftInStuckRemoval checks, against the API server, a removal of
// the manager's agent that stopped waiting for a pod held by a finalizer
// (at a time past AgentStopLimit): the agent's ServiceAccount goes, but
// its ConfigMap and credential stay, so that the namespace is found again
// by its ConfigMap although status records another one; once the pod is
// gone, the next pass deletes both.
func TestAgentLeftInStuckRemoval(t *testing.T) {
	ctx := context.Background()
	const ns = "agent-left-stuck"
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: "fleet-stuck"},
		Spec:   fleet.ClusterSpec{ClientID: "stuck-client"},
		Status: fleet.ClusterStatus{AgentDeployedNamespace: "agent-left-elsewhere"}}
	cfg, _ := json.Marshal(registration.AgentConfig{ClientID: cluster.Spec.ClientID})
	managed := map[string]string{registration.AgentManagedByLabel: registration.AgentManagedByValue}
	configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns, Labels: managed},
		Data: map[string]string{"config": string(cfg)}}
	cred := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: register.AgentSecretName, Namespace: ns}, Data: map[string][]byte{
		register.KeyKubeconfig: []byte("apiVersion: v1\nkind: Config\n"), register.KeyClusterNamespace: []byte(cluster.Namespace),
		register.KeyClusterName: []byte(cluster.Name)}}
	serviceAccount := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns, Labels: managed}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-7f-x", Namespace: ns, Finalizers: []string{"fleet-test/hold"},
		Labels:          map[string]string{"app": "fleet-agent", appsv1.DefaultDeploymentUniqueLabelKey: "7f"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "fleet-agent-7f", UID: "fleet-agent-7f", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fleet-agent", Image: "rancher/fleet-agent"}}}}
	for _, o := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, configMap, cred, serviceAccount, pod} {
		if err := up.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := up.Client.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err == nil {
			pod.SetFinalizers(nil)
			_ = up.Client.Update(ctx, pod)
		}
	})
	exists := func(o client.Object) error { return up.Client.Get(ctx, client.ObjectKeyFromObject(o), o) }

	now := time.Now()
	later := now.Add(registration.AgentStopLimit + time.Minute)
	_, left, err := registration.RemoveAgentIn(ctx, up.Client, cluster, ns, now, later)
	if err != nil || left != registration.AgentStuck {
		t.Fatalf("removal with a pod stuck: got %v, %v; want stuck", left, err)
	}
	if err := exists(serviceAccount); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceAccount with a pod stuck: want it deleted, got %v", err)
	}
	for _, o := range []client.Object{configMap, cred} {
		if err := exists(o); err != nil {
			t.Errorf("%T %s with a pod stuck: want it kept, got %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	if got := registration.AgentNamespaces(ctx, up.Client, cluster, ""); !slices.Contains(got, ns) {
		t.Errorf("namespaces of the removal after it stopped waiting: %v, want %s among them", got, ns)
	}

	if err := exists(pod); err != nil {
		t.Fatal(err)
	}
	pod.SetFinalizers(nil)
	if err := up.Client.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "stuck pod gone", func() error {
		if err := exists(pod); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod: %v", err)
		}
		return nil
	})
	removed, left, err := registration.RemoveAgentIn(ctx, up.Client, cluster, ns, now, later)
	if err != nil || left != registration.AgentGone || !removed {
		t.Fatalf("removal once the pod is gone: got %v, %v, %v; want removed, gone", removed, left, err)
	}
	for _, o := range []client.Object{configMap, cred} {
		if err := exists(o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s once the pod is gone: want it deleted, got %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
}
