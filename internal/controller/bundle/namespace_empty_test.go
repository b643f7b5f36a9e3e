package bundle_test

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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// noNamespaceMsg is what a Bundle's Ready condition says of a targeted
// cluster without status.namespace.
const noNamespaceMsg = "cluster has no namespace yet"

// refusedMsg is what it says of a cluster registration refused a
// namespace that belongs to another Cluster.
const refusedMsg = "registration refused the cluster's namespace"

// bundleReadyMentions waits until the Bundle's Ready condition is False and
// contains every one of want.
func bundleReadyMentions(t *testing.T, ctx context.Context, ws, name string, want ...string) {
	t.Helper()
	eventually(t, 60*time.Second, func() error {
		bu := &fleet.Bundle{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: name}, bu); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(bu.Status.Conditions, fleet.ConditionReady)
		if cond == nil || cond.Status != metav1.ConditionFalse {
			return fmt.Errorf("bundle %s Ready condition %+v, want False", name, cond)
		}
		for _, w := range want {
			if !strings.Contains(cond.Message, w) {
				return fmt.Errorf("bundle %s Ready message %q does not say %q", name, cond.Message, w)
			}
		}
		return nil
	})
}

// TestClearedClusterNamespaceKeepsDeployment: agent A clears its Cluster's
// status.namespace with its own credential (a restore of the Clusters
// without status looks the same). No registration runs here to set it
// back. A's BundleDeployment and its values Secret stay (same objects),
// the Bundle's Ready condition says why A gets nothing new, and a Cluster
// that never had a namespace gets no BundleDeployment at all.
// A was registered (Processed): unlike a Cluster still waiting for
// registration (TestUnregisteredClusterNotReported), it is reported.
func TestClearedClusterNamespaceKeepsDeployment(t *testing.T) {
	ctx := context.Background()
	ws := "ws-nsempty"
	createNamespace(t, ctx, ws, nil)
	a := newCluster(t, ctx, ws, "a", map[string]string{"app": "yes"}, time.Second)
	nsA := a.Status.Namespace
	update(t, ctx, a, true, func() {
		meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{Type: fleet.ConditionProcessed, Status: metav1.ConditionTrue, Reason: "NamespaceCreated"})
	})
	// A Cluster registration has not processed: no status at all. Its
	// namespace exists, so a BundleDeployment could be written there.
	fresh := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "fresh", Labels: map[string]string{"app": "yes"}}}
	must(t, env.Client.Create(ctx, fresh))
	nsFresh := names.ClusterNamespace(ws, "fresh")
	createNamespace(t, ctx, nsFresh, nil)

	bu := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}}
	bu.Spec.Resources = resources("kind: ConfigMap\nmetadata:\n  name: app\n")
	bu.Spec.Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{"replicas": 2}}}
	bu.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "yes"}}}}
	must(t, env.Client.Create(ctx, bu))
	key := types.NamespacedName{Namespace: nsA, Name: "app"}
	var bdUID, secUID types.UID
	eventually(t, 60*time.Second, func() error {
		bd, sec := &fleet.BundleDeployment{}, &corev1.Secret{}
		if err := env.Client.Get(ctx, key, bd); err != nil {
			return err
		}
		if err := env.Client.Get(ctx, key, sec); err != nil {
			return err
		}
		bdUID, secUID = bd.UID, sec.UID
		return nil
	})
	agentA := agentStatusClient(t, ctx, ws, nsA, "a")
	patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"namespace":null}}`))
	eventually(t, 30*time.Second, func() error {
		return agentA.Status().Patch(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "a"}}, patch)
	})
	// The manager has seen it once the bundle says so.
	bundleReadyMentions(t, ctx, ws, "app", "cluster "+ws+"/a: "+noNamespaceMsg, nsA)
	consistently(t, 8*time.Second, func() error {
		bd, sec := &fleet.BundleDeployment{}, &corev1.Secret{}
		if err := env.Client.Get(ctx, key, bd); err != nil {
			return fmt.Errorf("A's BundleDeployment: %w", err)
		}
		if bd.UID != bdUID || bd.DeletionTimestamp != nil {
			return fmt.Errorf("A's BundleDeployment replaced or deleting (uid %s, was %s)", bd.UID, bdUID)
		}
		if err := env.Client.Get(ctx, key, sec); err != nil || sec.UID != secUID {
			return fmt.Errorf("A's values Secret gone or replaced: %v", err)
		}
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: nsFresh, Name: "app"}, &fleet.BundleDeployment{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("BundleDeployment for the cluster that never had a namespace: %v", err)
		}
		return nil
	})
}

// Two Cluster names of one workspace that shorten to the same namespace
// (names.ClusterNamespace: 56 characters and a 6-hex hash).
const (
	conflictWorkspace = "ws-nsconflict"
	conflictOwner     = "edge-site-production-cluster-group-00344"
	conflictRefused   = "edge-site-production-cluster-group-08869"
)

// TestConflictingClusterKeepsNoOtherDeployment: registration refuses the
// second of two Clusters sharing a namespace (NamespaceConflict, no
// status.namespace). Targeted, it gets a failed target for that
// namespace, but never a BundleDeployment there, and it does not keep the
// owner's: once a bundle targets the refused cluster instead of the owner,
// the owner's BundleDeployment goes, and one of a bundle targeting both
// stays the owner's.
func TestConflictingClusterKeepsNoOtherDeployment(t *testing.T) {
	ctx := context.Background()
	ws := conflictWorkspace
	nsX := names.ClusterNamespace(ws, conflictOwner)
	if other := names.ClusterNamespace(ws, conflictRefused); other != nsX {
		t.Fatalf("the clusters do not collide: %s and %s", nsX, other)
	}
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, conflictOwner, map[string]string{"role": "owner"}, time.Second)
	refused := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: conflictRefused, Labels: map[string]string{"role": "refused"}}}
	must(t, env.Client.Create(ctx, refused))
	update(t, ctx, refused, true, func() {
		refused.Status.Agent.LastSeen = metav1.Now()
		meta.SetStatusCondition(&refused.Status.Conditions, metav1.Condition{Type: fleet.ConditionProcessed, Status: metav1.ConditionFalse,
			Reason: "NamespaceConflict", Message: "namespace " + nsX + " belongs to cluster " + ws + "/" + conflictOwner})
	})

	mk := func(name string, targets ...fleet.BundleTarget) *fleet.Bundle {
		bu := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}
		bu.Spec.Resources = resources("kind: ConfigMap\nmetadata:\n  name: " + name + "\n")
		bu.Spec.Targets = targets
		must(t, env.Client.Create(ctx, bu))
		return bu
	}
	moved := mk("moved", fleet.BundleTarget{ClusterName: conflictOwner})
	mk("both", fleet.BundleTarget{ClusterSelector: &metav1.LabelSelector{}})
	ownerOf := func(name string) (string, error) {
		bd := &fleet.BundleDeployment{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: nsX, Name: name}, bd); err != nil {
			return "", err
		}
		return bd.Labels[fleet.ClusterLabel], nil
	}
	eventually(t, 60*time.Second, func() error {
		for _, n := range []string{"moved", "both"} {
			if c, err := ownerOf(n); err != nil || c != conflictOwner {
				return fmt.Errorf("BundleDeployment %s in %s for %q (%v), want the owner's", n, nsX, c, err)
			}
		}
		return nil
	})
	bundleReadyMentions(t, ctx, ws, "both", "cluster "+ws+"/"+conflictRefused+": "+refusedMsg)

	update(t, ctx, moved, false, func() { moved.Spec.Targets = []fleet.BundleTarget{{ClusterName: conflictRefused}} })
	bundleReadyMentions(t, ctx, ws, "moved", "cluster "+ws+"/"+conflictRefused+": "+refusedMsg)
	eventually(t, 60*time.Second, func() error {
		_, err := ownerOf("moved")
		if err == nil {
			return fmt.Errorf("the owner's BundleDeployment of bundle moved is still in %s after moved stopped targeting the owner", nsX)
		}
		return client.IgnoreNotFound(err)
	})
	consistently(t, 5*time.Second, func() error {
		if _, err := ownerOf("moved"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("BundleDeployment of bundle moved in %s: %v", nsX, err)
		}
		if c, err := ownerOf("both"); err != nil || c != conflictOwner {
			return fmt.Errorf("BundleDeployment both in %s for %q (%v), want the owner's", nsX, c, err)
		}
		return nil
	})
	refusedKeepsNothing(t, ctx, refused, nsX, ownerOf)
}

// TestRewrittenClusterNamespaceMarksNoOtherDeployment: agent A, offline
// (never checked in), rewrites its status.namespace to cluster B's. The
// cluster status controller trusts only the namespace the manager gives
// A: B's BundleDeployment is never marked Offline, and A's own summary
// does not count it.
func TestRewrittenClusterNamespaceMarksNoOtherDeployment(t *testing.T) {
	ctx := context.Background()
	ws := "ws-nsstatus"
	createNamespace(t, ctx, ws, nil)
	a := newCluster(t, ctx, ws, "a", map[string]string{"name": "a"}, -1)
	b := newCluster(t, ctx, ws, "b", map[string]string{"name": "b"}, time.Second)
	nsA, nsB := a.Status.Namespace, b.Status.Namespace
	bu := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "only-b"}}
	bu.Spec.Resources = resources("kind: ConfigMap\nmetadata:\n  name: only-b\n")
	bu.Spec.Targets = []fleet.BundleTarget{{ClusterName: "b"}}
	must(t, env.Client.Create(ctx, bu))
	bdKey := types.NamespacedName{Namespace: nsB, Name: "only-b"}
	eventually(t, 60*time.Second, func() error {
		return env.Client.Get(ctx, bdKey, &fleet.BundleDeployment{})
	})
	// A is Offline by now (never seen): the controller has reconciled it.
	eventually(t, 60*time.Second, func() error {
		ca := &fleet.Cluster{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "a"}, ca); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(ca.Status.Conditions, fleet.ConditionOffline) {
			return fmt.Errorf("cluster a not Offline yet")
		}
		return nil
	})

	agentA := agentStatusClient(t, ctx, ws, nsA, "a")
	patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"namespace":"`+nsB+`"}}`))
	eventually(t, 30*time.Second, func() error {
		return agentA.Status().Patch(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "a"}}, patch)
	})
	consistently(t, 10*time.Second, func() error {
		bd := &fleet.BundleDeployment{}
		if err := env.Client.Get(ctx, bdKey, bd); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionOffline); c != nil {
			return fmt.Errorf("cluster b's BundleDeployment marked %+v by cluster a's status", c)
		}
		ca := &fleet.Cluster{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "a"}, ca); err != nil {
			return err
		}
		if ca.Status.Summary.DesiredReady != 0 {
			return fmt.Errorf("cluster a's summary counts %d deployments, want none of b's", ca.Status.Summary.DesiredReady)
		}
		return nil
	})
}

// TestUnregisteredClusterNotReported: a targeted Cluster registration has
// not processed yet (no status at all) gets no BundleDeployment and does
// not make the Bundle not ready: onboarding thousands of clusters must not
// turn every Bundle targeting them to TargetErrors. Once registration
// refuses it (Processed=False), the Bundle says so.
func TestUnregisteredClusterNotReported(t *testing.T) {
	ctx := context.Background()
	ws := "ws-nsfresh"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "a", map[string]string{"app": "yes"}, time.Second)
	fresh := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "fresh", Labels: map[string]string{"app": "yes"}}}
	must(t, env.Client.Create(ctx, fresh))
	nsFresh := names.ClusterNamespace(ws, "fresh")
	createNamespace(t, ctx, nsFresh, nil)
	bu := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}}
	bu.Spec.Resources = resources("kind: ConfigMap\nmetadata:\n  name: app\n")
	bu.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "yes"}}}}
	must(t, env.Client.Create(ctx, bu))
	eventually(t, 60*time.Second, func() error {
		if err := playAgents(ctx, ws, "app", nil, nil); err != nil {
			return err
		}
		got := &fleet.Bundle{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(bu), got); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionReady)
		if cond == nil || cond.Status != metav1.ConditionTrue || got.Status.Summary.DesiredReady != 1 {
			return fmt.Errorf("Ready %+v, desiredReady %d; want True for cluster a alone", cond, got.Status.Summary.DesiredReady)
		}
		return nil
	})
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: nsFresh, Name: "app"}, &fleet.BundleDeployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("BundleDeployment for the unregistered cluster: %v", err)
	}
	update(t, ctx, fresh, true, func() {
		meta.SetStatusCondition(&fresh.Status.Conditions, metav1.Condition{Type: fleet.ConditionProcessed, Status: metav1.ConditionFalse,
			Reason: "NamespaceConflict", Message: "namespace taken"})
	})
	bundleReadyMentions(t, ctx, ws, "app", "cluster "+ws+"/fresh: "+refusedMsg, nsFresh)
}
