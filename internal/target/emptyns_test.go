package target

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// TestComputeClusterWithoutNamespace: a selected cluster whose
// status.namespace is empty (not registered yet, refused a namespace that
// belongs to another Cluster, or cleared) gets a failed target for the
// namespace the manager computes for it, never skipped (the bundle
// controller would delete its BundleDeployment as untargeted); one being
// deleted is skipped. Only a cluster registration has not processed yet
// (no Processed condition) is Pending, left out of the bundle's status.
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
		{name: "refused (NamespaceConflict)", want: 1,
			processed: &metav1.Condition{Type: fleet.ConditionProcessed, Status: metav1.ConditionFalse, Reason: "NamespaceConflict"}},
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
