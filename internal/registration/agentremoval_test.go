package registration_test

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/registration"
)

// TestAgentLeftIn checks, against the API server, what the removal of the
// manager's agent sees left of it in a namespace: a live Deployment
// fleet-agent is one the manager did not make (it deleted its own), one
// being deleted, or ReplicaSets or pods labelled app=fleet-agent left
// after it, mean its pods may still run, and only then is it gone.
func TestAgentLeftIn(t *testing.T) {
	ctx := context.Background()
	labels := map[string]string{"app": "fleet-agent"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fleet-agent", Image: "rancher/fleet-agent"}}}}
	deployment := func(ns string) client.Object {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}
	}
	cases := []struct {
		name   string
		objs   func(ns string) []client.Object
		delete bool // the first object is deleted, a finalizer holding it
		want   registration.AgentLeft
	}{
		{name: "nothing", objs: func(string) []client.Object { return nil }, want: registration.AgentGone},
		{name: "other pods", want: registration.AgentGone, objs: func(ns string) []client.Object {
			return []client.Object{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{"app": "web"}},
				Spec: template.Spec}}
		}},
		{name: "deployment", objs: func(ns string) []client.Object { return []client.Object{deployment(ns)} }, want: registration.AgentRunning},
		{name: "deployment deleted", delete: true, want: registration.AgentStopping, objs: func(ns string) []client.Object {
			d := deployment(ns)
			d.SetFinalizers([]string{"fleet-test/hold"})
			return []client.Object{d}
		}},
		{name: "replicaset", want: registration.AgentStopping, objs: func(ns string) []client.Object {
			return []client.Object{&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-1", Namespace: ns, Labels: labels},
				Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}}
		}},
		{name: "pod", want: registration.AgentStopping, objs: func(ns string) []client.Object {
			return []client.Object{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-1", Namespace: ns, Labels: labels}, Spec: template.Spec}}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := "agent-left-" + string(rune('a'+i))
			objs := append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}}, tc.objs(ns)...)
			for _, o := range objs {
				if err := up.Client.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			if tc.delete {
				held := objs[1]
				if err := up.Client.Delete(ctx, held); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := up.Client.Get(ctx, client.ObjectKeyFromObject(held), held); err == nil {
						held.SetFinalizers(nil)
						_ = up.Client.Update(ctx, held)
					}
				})
			}
			got, err := registration.AgentLeftIn(ctx, up.Client, ns)
			if err != nil || got != tc.want {
				t.Errorf("agentLeftIn: got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
