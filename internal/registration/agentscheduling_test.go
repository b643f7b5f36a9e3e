package registration_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
)

// TestImportedAgentScheduling imports down[0] with Rancher Fleet's
// agentSchedulingCustomization and agentPullSecrets and reads back, on the
// downstream API server, the PriorityClass, the PodDisruptionBudget and
// the agent Deployment that names them; then follows edits of the Cluster:
// a new priority value (the API server does not let a PriorityClass's
// value change), the priorityClass removed (kept while another agent names
// it, then deleted downstream), bad input (refused on the Cluster, the
// agent left as it is), and the podDisruptionBudget removed (kept when
// someone else took it over, else deleted).
func TestImportedAgentScheduling(t *testing.T) {
	ctx := context.Background()
	d := down[0]
	const agentNS = "agent-scheduling"
	never := corev1.PreemptNever
	createKubeconfigSecret(t, d, workspace, "sched-kubeconfig")
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "sched", Namespace: workspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "sched-kubeconfig", AgentNamespace: agentNS,
			AgentSchedulingCustomization: &fleet.AgentSchedulingCustomization{
				PriorityClass:       &fleet.PriorityClassSpec{Value: 1000, PreemptionPolicy: &never},
				PodDisruptionBudget: &fleet.PodDisruptionBudgetSpec{MinAvailable: "1"},
			},
			AgentPullSecrets: &[]corev1.LocalObjectReference{{Name: "regcred"}}}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	waitImported(t, cluster)

	pc := &schedulingv1.PriorityClass{}
	if err := d.Client.Get(ctx, client.ObjectKey{Name: registration.AgentPriorityClassName}, pc); err != nil {
		t.Fatalf("priority class downstream: %v", err)
	}
	if pc.Value != 1000 || ptr.Deref(pc.PreemptionPolicy, "") != corev1.PreemptNever || pc.Description != "Priority class for Fleet Agent" ||
		pc.Labels[registration.AgentManagedByLabel] != registration.AgentManagedByValue {
		t.Errorf("priority class value %d, preemptionPolicy %v, description %q, labels %v", pc.Value, ptr.Deref(pc.PreemptionPolicy, ""), pc.Description, pc.Labels)
	}
	pdb := agentPDB(t, d, agentNS)
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget downstream")
	}
	if !reflect.DeepEqual(pdb.Spec.MinAvailable, ptr.To(intstr.FromInt32(1))) || pdb.Spec.MaxUnavailable != nil ||
		!reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, map[string]string{"app": "fleet-agent"}) {
		t.Errorf("PDB spec %+v", pdb.Spec)
	}
	pod := agentDeployment(t, d, agentNS).Spec.Template.Spec
	if pod.PriorityClassName != registration.AgentPriorityClassName {
		t.Errorf("agent priorityClassName %q, want %q", pod.PriorityClassName, registration.AgentPriorityClassName)
	}
	if want := []corev1.LocalObjectReference{{Name: "regcred"}}; !reflect.DeepEqual(pod.ImagePullSecrets, want) {
		t.Errorf("agent imagePullSecrets %v, want %v", pod.ImagePullSecrets, want)
	}

	t.Run("new priority value", func(t *testing.T) {
		editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.AgentSchedulingCustomization.PriorityClass.Value = 2000 })
		eventually(t, "priority class with the new value", func() error {
			pc := &schedulingv1.PriorityClass{}
			if err := d.Client.Get(ctx, client.ObjectKey{Name: registration.AgentPriorityClassName}, pc); err != nil {
				return err
			}
			if pc.Value != 2000 {
				return fmt.Errorf("value %d", pc.Value)
			}
			return nil
		})
		waitImportedAt(t, cluster)
	})

	t.Run("priorityClass removed", func(t *testing.T) {
		// Another agent of the cluster (another Cluster importing it into
		// another namespace) still names the class: it stays.
		other := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: "default", Labels: map[string]string{"app": "fleet-agent"}},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fleet-agent"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "fleet-agent"}},
					Spec: corev1.PodSpec{PriorityClassName: registration.AgentPriorityClassName, Containers: []corev1.Container{{Name: "a", Image: "img"}}}}}}
		if err := d.Client.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Client.Delete(context.Background(), other) })
		editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.AgentSchedulingCustomization.PriorityClass = nil })
		waitImportedAt(t, cluster)
		if name := agentDeployment(t, d, agentNS).Spec.Template.Spec.PriorityClassName; name != "" {
			t.Errorf("priorityClassName %q after the priorityClass was removed", name)
		}
		if err := d.Client.Get(ctx, client.ObjectKey{Name: registration.AgentPriorityClassName}, &schedulingv1.PriorityClass{}); err != nil {
			t.Errorf("priority class another agent names: %v", err)
		}

		// No agent names it any more: the next install deletes it.
		if err := d.Client.Delete(ctx, other); err != nil {
			t.Fatal(err)
		}
		editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.RedeployAgentGeneration++ })
		eventually(t, "priority class deleted", func() error {
			err := d.Client.Get(ctx, client.ObjectKey{Name: registration.AgentPriorityClassName}, &schedulingv1.PriorityClass{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("priority class still there: %v", err)
			}
			return nil
		})
		waitImportedAt(t, cluster)
		if agentPDB(t, d, agentNS) == nil {
			t.Error("the PodDisruptionBudget went with the priority class")
		}
	})

	t.Run("bad input leaves the agent", func(t *testing.T) {
		dep := agentDeployment(t, d, agentNS)
		scaleToZero(t, d, dep)
		editCluster(t, cluster, func(s *fleet.ClusterSpec) {
			s.AgentSchedulingCustomization.PodDisruptionBudget = &fleet.PodDisruptionBudgetSpec{MinAvailable: "1", MaxUnavailable: "50%"}
		})
		gen := cluster.Generation
		var cond *metav1.Condition
		eventually(t, "import refused on the Cluster", func() error {
			c := &fleet.Cluster{}
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
				return err
			}
			cond = meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
			if cond == nil || cond.ObservedGeneration != gen || cond.Status != metav1.ConditionFalse {
				return fmt.Errorf("imported condition %+v, want False at generation %d", cond, gen)
			}
			return nil
		})
		if cond.Reason != registration.ReasonInvalidAgentScheduling ||
			!strings.Contains(cond.Message, "spec.agentSchedulingCustomization.podDisruptionBudget: minAvailable") || !strings.Contains(cond.Message, "both set") {
			t.Errorf("imported condition %s: %q", cond.Reason, cond.Message)
		}
		eventually(t, "one warning event", func() error {
			var list eventsv1.EventList
			if err := up.Client.List(ctx, &list, client.InNamespace(workspace)); err != nil {
				return err
			}
			n := 0
			for _, e := range list.Items {
				if e.Regarding.Name == cluster.Name && e.Reason == registration.ReasonInvalidAgentScheduling && e.Type == corev1.EventTypeWarning {
					n++
				}
			}
			if n != 1 {
				return fmt.Errorf("%d events", n)
			}
			return nil
		})
		// Nothing downstream was touched: the manager's apply would set
		// replicas 1 again, and the PDB keeps minAvailable.
		got := agentDeployment(t, d, agentNS)
		if ptr.Deref(got.Spec.Replicas, -1) != 0 {
			t.Errorf("agent re-applied (replicas %v) from an invalid Cluster", ptr.Deref(got.Spec.Replicas, -1))
		}
		if pdb := agentPDB(t, d, agentNS); pdb == nil || !reflect.DeepEqual(pdb.Spec.MinAvailable, ptr.To(intstr.FromInt32(1))) {
			t.Errorf("PDB after the refused edit: %+v", pdb)
		}

		editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.AgentSchedulingCustomization.PodDisruptionBudget.MinAvailable = "" })
		eventually(t, "fixed input installed", func() error {
			pdb := agentPDB(t, d, agentNS)
			if pdb == nil || pdb.Spec.MinAvailable != nil || !reflect.DeepEqual(pdb.Spec.MaxUnavailable, ptr.To(intstr.FromString("50%"))) {
				return fmt.Errorf("PDB %+v", pdb)
			}
			if r := ptr.Deref(agentDeployment(t, d, agentNS).Spec.Replicas, -1); r != 1 {
				return fmt.Errorf("replicas %d, want 1 from the manager's apply", r)
			}
			return nil
		})
		waitImportedAt(t, cluster)
	})

	t.Run("podDisruptionBudget removed, not the manager's", func(t *testing.T) {
		// Someone took the PDB over: it no longer carries the manager's
		// label, so the manager must leave it.
		pdb := agentPDB(t, d, agentNS)
		base := pdb.DeepCopy()
		delete(pdb.Labels, registration.AgentManagedByLabel)
		if err := d.Client.Patch(ctx, pdb, client.MergeFrom(base), client.FieldOwner("test-operator")); err != nil {
			t.Fatal(err)
		}
		editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.AgentSchedulingCustomization = nil; s.AgentPullSecrets = nil })
		eventually(t, "agent updated without pull secrets", func() error {
			if ps := agentDeployment(t, d, agentNS).Spec.Template.Spec.ImagePullSecrets; len(ps) != 0 {
				return fmt.Errorf("imagePullSecrets %v", ps)
			}
			return nil
		})
		waitImportedAt(t, cluster)
		if agentPDB(t, d, agentNS) == nil {
			t.Error("a PodDisruptionBudget without the manager's label was deleted")
		}
	})

	t.Run("podDisruptionBudget removed, the manager's", func(t *testing.T) {
		// Set again, the manager applies it with its label again.
		editCluster(t, cluster, func(s *fleet.ClusterSpec) {
			s.AgentSchedulingCustomization = &fleet.AgentSchedulingCustomization{PodDisruptionBudget: &fleet.PodDisruptionBudgetSpec{}}
		})
		waitImportedAt(t, cluster)
		pdb := agentPDB(t, d, agentNS)
		if pdb == nil || pdb.Labels[registration.AgentManagedByLabel] != registration.AgentManagedByValue ||
			!reflect.DeepEqual(pdb.Spec.MaxUnavailable, ptr.To(intstr.FromInt32(0))) || pdb.Spec.MinAvailable != nil {
			t.Fatalf("PDB for podDisruptionBudget {}: %+v, want maxUnavailable 0 and the manager's label", pdb)
		}
		editCluster(t, cluster, func(s *fleet.ClusterSpec) { s.AgentSchedulingCustomization.PodDisruptionBudget = nil })
		eventually(t, "PDB deleted", func() error {
			if pdb := agentPDB(t, d, agentNS); pdb != nil {
				return fmt.Errorf("still there: %+v", pdb.Spec)
			}
			return nil
		})
		waitImportedAt(t, cluster)
	})
}

// editCluster changes cluster's spec with edit (a merge patch) and leaves
// the patched Cluster in cluster.
func editCluster(t *testing.T, cluster *fleet.Cluster, edit func(*fleet.ClusterSpec)) {
	t.Helper()
	ctx := context.Background()
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
		t.Fatal(err)
	}
	base := cluster.DeepCopy()
	edit(&cluster.Spec)
	if err := up.Client.Patch(ctx, cluster, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// waitImportedAt waits until cluster is Imported at its current generation.
func waitImportedAt(t *testing.T, cluster *fleet.Cluster) {
	t.Helper()
	gen := cluster.Generation
	eventually(t, "imported at the new generation", func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported); cond == nil ||
			cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != gen {
			return fmt.Errorf("imported condition %+v, want True at generation %d", cond, gen)
		}
		return nil
	})
}

// agentPDB is the agent's PodDisruptionBudget in ns of d, nil when none.
func agentPDB(t *testing.T, d *testenv.Cluster, ns string) *policyv1.PodDisruptionBudget {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{}
	err := d.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: registration.AgentPodDisruptionBudgetName}, pdb)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return pdb
}
