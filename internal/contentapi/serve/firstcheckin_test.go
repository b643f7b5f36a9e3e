package serve

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/controller/clusterstatus"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/scheme"
)

// TestWriteFirstCheckIn: a cluster's first check-in is written together
// with the Ready condition and roll-up the Cluster controller would write
// after it, in one write under the cached resourceVersion; every other
// check-in, and one the cache is behind for, is left to the plain patch
// (false) and writes nothing itself.
func TestWriteFirstCheckIn(t *testing.T) {
	ns := names.ClusterNamespace("ws", "c1")
	registered := func() *fleet.Cluster {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "c1"}}
		c.Status.Namespace = ns
		c.Status.Conditions = []metav1.Condition{{Type: fleet.ConditionProcessed, Status: metav1.ConditionTrue,
			Reason: "NamespaceCreated", LastTransitionTime: metav1.Now()}}
		return c
	}
	ready := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b1",
		Labels: map[string]string{fleet.BundleNamespaceLabel: "ws", fleet.BundleLabel: "b1"}}}
	ready.Spec.DeploymentID, ready.Spec.StagedDeploymentID = "id", "id"
	ready.Status.AppliedDeploymentID, ready.Status.Ready, ready.Status.NonModified = "id", true, true
	ready.Status.ResourceCounts = fleet.ResourceCounts{Ready: 2, DesiredReady: 2}
	seen := registered()
	seen.Status.Agent.LastSeen = metav1.NewTime(time.Now().Add(-time.Minute))
	noNamespace := registered()
	noNamespace.Status.Namespace = ""

	report := contentapi.AgentReport{Agent: fleet.AgentStatus{LastSeen: metav1.Now(), Namespace: "cattle-fleet-system", ReadyNodes: 1,
		ReadyNodeNames: []string{"n1"}}, Display: contentapi.AgentDisplay{ReadyNodes: "1/1", SampleNode: "n1"}}
	cs := contentapi.NewClusterStatus("ws", ns, "c1", report)

	for _, tc := range []struct {
		name    string
		stored  *fleet.Cluster
		cached  func(stored *fleet.Cluster) *fleet.Cluster
		written bool
	}{
		{name: "first check-in", stored: registered(), written: true},
		{name: "a later check-in", stored: seen},
		{name: "the namespace not yet in the cache", stored: noNamespace},
		{name: "the cache behind the stored Cluster", stored: registered(), cached: func(s *fleet.Cluster) *fleet.Cluster {
			old := s.DeepCopy()
			old.ResourceVersion = "1"
			return old
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(tc.stored.DeepCopy(), ready.DeepCopy()).
				WithStatusSubresource(&fleet.Cluster{}).Build()
			before := &fleet.Cluster{}
			if err := store.Get(ctx, client.ObjectKeyFromObject(tc.stored), before); err != nil {
				t.Fatal(err)
			}
			var cache client.Reader = store
			if tc.cached != nil {
				if err := store.Update(ctx, before.DeepCopy()); err != nil { // the stored Cluster moves on
					t.Fatal(err)
				}
				cache = fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(tc.cached(before), ready.DeepCopy()).Build()
				if err := store.Get(ctx, client.ObjectKeyFromObject(tc.stored), before); err != nil {
					t.Fatal(err)
				}
			}
			h := &handler{cache: cache, statuses: store, firstCheckIn: clusterstatus.FirstCheckIn(cache, clusterstatus.Options{})}

			got := h.writeFirstCheckIn(ctx, ns, "c1", cs)
			after := &fleet.Cluster{}
			if err := store.Get(ctx, client.ObjectKeyFromObject(tc.stored), after); err != nil {
				t.Fatal(err)
			}
			if got != tc.written {
				t.Fatalf("written %v, want %v", got, tc.written)
			}
			if !tc.written {
				if after.ResourceVersion != before.ResourceVersion {
					t.Fatalf("the Cluster was written (resourceVersion %s -> %s)", before.ResourceVersion, after.ResourceVersion)
				}
				return
			}
			st := after.Status
			if st.Agent.LastSeen.Unix() != report.Agent.LastSeen.Unix() || st.Display.SampleNode != "n1" || st.Agent.ReadyNodes != 1 {
				t.Errorf("the agent's report is not on the Cluster: %+v %+v", st.Agent, st.Display)
			}
			if !meta.IsStatusConditionTrue(st.Conditions, fleet.ConditionReady) || !meta.IsStatusConditionFalse(st.Conditions, fleet.ConditionOffline) {
				t.Errorf("conditions %+v: want Ready and not Offline", st.Conditions)
			}
			if !meta.IsStatusConditionTrue(st.Conditions, fleet.ConditionProcessed) {
				t.Errorf("the registration's Processed condition was lost: %+v", st.Conditions)
			}
			if st.Display.ReadyBundles != "1/1" || st.Summary.Ready != 1 || st.ResourceCounts.Ready != 2 {
				t.Errorf("roll-up %q %+v %+v, want the ready deployment counted", st.Display.ReadyBundles, st.Summary, st.ResourceCounts)
			}
			// What the Cluster controller computes next is what is stored:
			// it has nothing left to write.
			updated := after.DeepCopy()
			bds := &fleet.BundleDeploymentList{}
			if err := store.List(ctx, bds, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			clusterstatus.ComputeClusterStatus(updated, bds.Items, clusterstatus.LivenessOf(updated, time.Now(), 45*time.Minute)).Apply(&updated.Status)
			if !equality.Semantic.DeepEqual(after.Status, updated.Status) {
				t.Errorf("the Cluster controller would still write:\n%+v\nstored:\n%+v", updated.Status, after.Status)
			}
		})
	}
}

// TestFirstCheckInWaitsForLeadership: a replica that does not lead leaves
// a first check-in to the plain patch without reading the Cluster from its
// cache (which would start an informer of every Cluster on a standby); once
// it leads, it writes the check-in with its status.
func TestFirstCheckInWaitsForLeadership(t *testing.T) {
	ns := names.ClusterNamespace("ws", "c1")
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "c1"}}
	c.Status.Namespace = ns
	store := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(c).WithStatusSubresource(&fleet.Cluster{}).Build()
	cache := &clusterGets{Reader: store}
	elected := make(chan struct{})
	h := &handler{cache: cache, statuses: store, firstCheckIn: clusterstatus.FirstCheckIn(store, clusterstatus.Options{}), elected: elected}
	cs := contentapi.NewClusterStatus("ws", ns, "c1", contentapi.AgentReport{Agent: fleet.AgentStatus{LastSeen: metav1.Now()}})

	if h.writeFirstCheckIn(t.Context(), ns, "c1", cs) {
		t.Fatal("a replica that does not lead wrote the first check-in")
	}
	if cache.gets != 0 {
		t.Fatalf("a replica that does not lead read %d Clusters from its cache, want none", cache.gets)
	}
	close(elected)
	if !h.writeFirstCheckIn(t.Context(), ns, "c1", cs) {
		t.Fatal("the leader did not write the first check-in")
	}
	after := &fleet.Cluster{}
	if err := store.Get(t.Context(), client.ObjectKeyFromObject(c), after); err != nil {
		t.Fatal(err)
	}
	if after.Status.Agent.LastSeen.IsZero() || !meta.IsStatusConditionTrue(after.Status.Conditions, fleet.ConditionReady) {
		t.Errorf("the leader's write: lastSeen %v, conditions %+v; want the check-in and Ready", after.Status.Agent.LastSeen, after.Status.Conditions)
	}
}

// clusterGets counts reads of Clusters.
type clusterGets struct {
	client.Reader
	gets int
}

func (r *clusterGets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*fleet.Cluster); ok {
		r.gets++
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}
