package target

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// TestComputeClusterWithoutNamespace: a selected cluster whose
// status.namespace is empty (not registered yet, or cleared) gets a failed target for the
// namespace the manager computes for it, never skipped (the bundle
// controller would delete its BundleDeployment as untargeted); one being
// deleted is skipped. Only a cluster registration has not processed yet
// (no Processed condition) is Pending, left out of the bundle's status. A
// refused one is TestComputeRefusedCluster.
func TestComputeClusterWithoutNamespace(t *testing.T) {
	all := []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	cases := []struct {
		name      string
		deleting  bool
		processed *metav1.Condition
		want      int
		pending   bool
	}{
		{name: "not registered yet", want: 1, pending: true},
		{name: "cleared after registration", want: 1,
			processed: &metav1.Condition{Type: fleet.ConditionProcessed, Status: metav1.ConditionTrue, Reason: "NamespaceCreated"}},
		{name: "deleting", deleting: true, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := cluster("a")
			a.Status.Namespace = ""
			if tc.processed != nil {
				a.Status.Conditions = []metav1.Condition{*tc.processed}
			}
			if tc.deleting {
				now := metav1.Now()
				a.DeletionTimestamp = &now
			}
			targets, err := Compute(Input{Bundle: bundle("", all, nil), Clusters: infos(nil, a)})
			if err != nil {
				t.Fatal(err)
			}
			if len(targets) != tc.want {
				t.Fatalf("%d targets, want %d", len(targets), tc.want)
			}
			if tc.want == 0 {
				return
			}
			tg, own := targets[0], names.ClusterNamespace("ws", "a")
			if tg.Cluster.Status.Namespace != own {
				t.Errorf("target namespace %q, want the computed %q", tg.Cluster.Status.Namespace, own)
			}
			if tg.Err == nil || !strings.Contains(tg.Err.Error(), "cluster has no namespace yet") || !strings.Contains(tg.Err.Error(), own) {
				t.Errorf("error %v, want one saying the cluster has no namespace yet and naming %s", tg.Err, own)
			}
			if tg.Pending != tc.pending {
				t.Errorf("Pending = %v, want %v", tg.Pending, tc.pending)
			}
			if a.Status.Namespace != "" {
				t.Error("Compute modified the input cluster")
			}
		})
	}
}

// TestComputeRefusedCluster: a cluster registration refused for
// NamespaceConflict gets a Refused failed target for its computed
// namespace whatever its status.namespace says, even that namespace (its
// agent may write it there), and the message says registration refused it
// instead of promising the manager will set it.
func TestComputeRefusedCluster(t *testing.T) {
	all := []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	own := names.ClusterNamespace("ws", "a")
	conflict := metav1.Condition{Type: fleet.ConditionProcessed, Status: metav1.ConditionFalse, Reason: "NamespaceConflict"}
	for _, tc := range []struct {
		name      string
		namespace string
		processed metav1.Condition
		refused   bool
		msg       string // "" for a deploying target
	}{
		{name: "refused, empty", processed: conflict, refused: true, msg: "registration refused the cluster's namespace " + own},
		{name: "refused, agent wrote the computed namespace", namespace: own, processed: conflict, refused: true, msg: "registration refused"},
		{name: "refused, agent wrote another namespace", namespace: "other", processed: conflict, refused: true, msg: "registration refused"},
		{name: "processed", namespace: own,
			processed: metav1.Condition{Type: fleet.ConditionProcessed, Status: metav1.ConditionTrue, Reason: "NamespaceCreated"}},
		{name: "failed for another reason", namespace: own,
			processed: metav1.Condition{Type: fleet.ConditionProcessed, Status: metav1.ConditionFalse, Reason: "Other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := cluster("a")
			a.Status.Namespace = tc.namespace
			a.Status.Conditions = []metav1.Condition{tc.processed}
			targets, err := Compute(Input{Bundle: bundle("", all, nil), Clusters: infos(nil, a)})
			if err != nil || len(targets) != 1 {
				t.Fatalf("%d targets, err %v; want 1", len(targets), err)
			}
			tg := targets[0]
			if tg.Refused != tc.refused || tg.Pending || tg.Cluster.Status.Namespace != own {
				t.Fatalf("Refused %v Pending %v namespace %q; want Refused %v for %s", tg.Refused, tg.Pending, tg.Cluster.Status.Namespace, tc.refused, own)
			}
			if tc.msg == "" {
				if tg.Err != nil {
					t.Fatalf("error %v, want a deploying target", tg.Err)
				}
				return
			}
			if tg.Err == nil || !strings.Contains(tg.Err.Error(), tc.msg) || !strings.Contains(tg.Err.Error(), "Processed condition") ||
				strings.Contains(tg.Err.Error(), "until the manager") {
				t.Fatalf("error %v, want one containing %q and pointing at the Processed condition", tg.Err, tc.msg)
			}
		})
	}
}

// TestPendingWindow: a Cluster registration has not processed is Pending
// only for PendingWindow after its creation (now passed in); after that it
// is reported as any cluster without a namespace. A zero now leaves
// Pending unbounded.
func TestPendingWindow(t *testing.T) {
	all := []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		now     time.Time
		pending bool
		until   time.Time
	}{
		{name: "just created", now: created.Add(time.Minute), pending: true, until: created.Add(PendingWindow)},
		{name: "window just over", now: created.Add(PendingWindow), until: created.Add(PendingWindow)},
		{name: "long ago", now: created.Add(24 * time.Hour), until: created.Add(PendingWindow)},
		{name: "no now", pending: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := cluster("a")
			a.Status.Namespace = ""
			a.CreationTimestamp = metav1.NewTime(created)
			targets, err := Compute(Input{Bundle: bundle("", all, nil), Clusters: infos(nil, a), Now: tc.now})
			if err != nil || len(targets) != 1 {
				t.Fatalf("%d targets, err %v; want 1", len(targets), err)
			}
			tg := targets[0]
			if tg.Pending != tc.pending || !tg.PendingUntil.Equal(tc.until) {
				t.Fatalf("Pending %v until %v, want %v until %v", tg.Pending, tg.PendingUntil, tc.pending, tc.until)
			}
			if tg.Err == nil || !strings.Contains(tg.Err.Error(), "cluster has no namespace yet") {
				t.Fatalf("error %v, want the cluster reported without a namespace", tg.Err)
			}
		})
	}
}
