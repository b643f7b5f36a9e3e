package registration_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/registration"
)

// TestAgentLeftIn checks, against the API server, what the removal of the
// manager's agent sees left of it in a namespace: a live Deployment
// fleet-agent is one the manager did not make (it deleted its own); one
// being deleted, a ReplicaSet it controls, or a pod of such a ReplicaSet
// (left or, once gone, named after the pod's pod-template-hash) mean its
// pods may still run, until all have been being deleted for longer than
// AgentStopLimit (stuck); only then is it gone. Other pods and
// ReplicaSets labelled app=fleet-agent, which the agent's Deployment did
// not make, do not hold the removal.
func TestAgentLeftIn(t *testing.T) {
	ctx := context.Background()
	labels := map[string]string{"app": "fleet-agent"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fleet-agent", Image: "rancher/fleet-agent"}}}}
	deployment := func(ns string) client.Object {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}
	}
	agentRS := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "fleet-agent", UID: "agent-deployment", Controller: ptr.To(true)}
	replicaSet := func(ns, name string, owner metav1.OwnerReference) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}
	}
	// pod is labelled app=fleet-agent and pod-template-hash hash, and
	// controlled by ReplicaSet rs (none when "").
	pod := func(ns, hash, rs string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-" + hash + "-x", Namespace: ns,
			Labels: map[string]string{"app": "fleet-agent", appsv1.DefaultDeploymentUniqueLabelKey: hash}}, Spec: template.Spec}
		if rs != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: "rs-" + types.UID(rs), Controller: ptr.To(true)}}
		}
		return p
	}
	later := time.Now().Add(registration.AgentStopLimit + time.Minute)
	cases := []struct {
		name   string
		objs   func(ns string) []client.Object
		delete bool      // the first object is deleted, a finalizer holding it
		at     time.Time // when agentLeftIn looks; now when zero
		seen   time.Time // when the removal first saw it stopping; at when zero
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
			return []client.Object{replicaSet(ns, "fleet-agent-1", agentRS)}
		}},
		{name: "pod of the agent's replicaset", want: registration.AgentStopping, objs: func(ns string) []client.Object {
			rs := replicaSet(ns, "fleet-agent-2", agentRS)
			return []client.Object{rs, pod(ns, "2", "fleet-agent-2")}
		}},
		{name: "pod of the agent's replicaset gone", want: registration.AgentStopping, objs: func(ns string) []client.Object {
			return []client.Object{pod(ns, "3", "fleet-agent-3")}
		}},
		{name: "unrelated pod", want: registration.AgentGone, objs: func(ns string) []client.Object {
			return []client.Object{pod(ns, "4", "")}
		}},
		{name: "pod of another replicaset", want: registration.AgentGone, objs: func(ns string) []client.Object {
			other := agentRS
			other.Name, other.UID = "web", "web-deployment"
			return []client.Object{replicaSet(ns, "fleet-agent-5", other), pod(ns, "5", "fleet-agent-5")}
		}},
		{name: "pod stopping", delete: true, want: registration.AgentStopping, objs: func(ns string) []client.Object {
			p := pod(ns, "6", "fleet-agent-6")
			p.SetFinalizers([]string{"fleet-test/hold"})
			return []client.Object{p}
		}},
		{name: "pod stuck", delete: true, at: later, want: registration.AgentStuck, objs: func(ns string) []client.Object {
			p := pod(ns, "7", "fleet-agent-7")
			p.SetFinalizers([]string{"fleet-test/hold"})
			return []client.Object{p}
		}},
		{name: "pod stuck and replicaset not deleted yet", delete: true, at: later, want: registration.AgentStopping, objs: func(ns string) []client.Object {
			p := pod(ns, "8", "fleet-agent-8")
			p.SetFinalizers([]string{"fleet-test/hold"})
			rs := replicaSet(ns, "fleet-agent-8", agentRS)
			return []client.Object{p, rs}
		}},
		{name: "replicaset never marked", at: later, seen: time.Now(), want: registration.AgentStuck, objs: func(ns string) []client.Object {
			return []client.Object{replicaSet(ns, "fleet-agent-9", agentRS)}
		}},
		{name: "deployment held, replicaset not marked", delete: true, at: later, want: registration.AgentStuck, objs: func(ns string) []client.Object {
			d := deployment(ns)
			d.SetFinalizers([]string{"fleet-test/hold"})
			return []client.Object{d, replicaSet(ns, "fleet-agent-10", agentRS)}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := "agent-left-" + string(rune('a'+i))
			objs := append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}}, tc.objs(ns)...)
			sets := map[string]types.UID{}
			for _, o := range objs {
				// A pod controlled by a ReplicaSet created before it
				// names that ReplicaSet's UID.
				for i, ref := range o.GetOwnerReferences() {
					if uid, ok := sets[ref.Name]; ok && ref.Kind == "ReplicaSet" {
						o.GetOwnerReferences()[i].UID = uid
					}
				}
				if err := up.Client.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
				if _, ok := o.(*appsv1.ReplicaSet); ok {
					sets[o.GetName()] = o.GetUID()
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
			at := tc.at
			if at.IsZero() {
				at = time.Now()
			}
			seen := tc.seen
			if seen.IsZero() {
				seen = at
			}
			got, err := registration.AgentLeftIn(ctx, up.Client, ns, seen, at)
			if err != nil || got != tc.want {
				t.Errorf("agentLeftIn: got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
