package target

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// TestComputeTrustsOnlyTheClusterNamespace: the agent's credential may
// patch its Cluster's status, status.namespace included. A value other than
// the namespace the manager gives the cluster never becomes the namespace
// of a target: the target keeps the cluster's own namespace (so that its
// BundleDeployment there is neither moved nor deleted) and carries an error
// (so that nothing is written for it), while other clusters are untouched.
func TestComputeTrustsOnlyTheClusterNamespace(t *testing.T) {
	all := []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	own := func(name string) string { return names.ClusterNamespace("ws", name) }
	cases := []struct {
		name    string
		written string // status.namespace of cluster "a"
		wantErr bool
	}{
		{name: "its own namespace", written: own("a")},
		{name: "another cluster's namespace", written: own("b"), wantErr: true},
		{name: "a system namespace", written: "kube-system", wantErr: true},
		{name: "the namespace of a cluster of another workspace", written: names.ClusterNamespace("other", "a"), wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := cluster("a"), cluster("b")
			a.Status.Namespace = tc.written
			targets, err := Compute(Input{Bundle: bundle("", all, nil), Clusters: infos(nil, a, b)})
			if err != nil {
				t.Fatal(err)
			}
			if len(targets) != 2 {
				t.Fatalf("%d targets, want 2", len(targets))
			}
			for _, tg := range targets {
				if got, want := tg.Cluster.Status.Namespace, own(tg.Cluster.Name); got != want {
					t.Errorf("cluster %s: target namespace %q, want %q", tg.Cluster.Name, got, want)
				}
			}
			ta, tb := targets[0], targets[1]
			if tb.Err != nil {
				t.Errorf("cluster b: unexpected error %v", tb.Err)
			}
			switch {
			case !tc.wantErr && ta.Err != nil:
				t.Errorf("cluster a: unexpected error %v", ta.Err)
			case tc.wantErr && (ta.Err == nil || !strings.Contains(ta.Err.Error(), "status.namespace is not the cluster's namespace "+own("a"))):
				t.Errorf("cluster a: error %v, want one naming its namespace %s", ta.Err, own("a"))
			case tc.wantErr && strings.Contains(ta.Err.Error(), tc.written):
				// The Bundle's readers see it: the agent's value stays out.
				t.Errorf("cluster a: error %q repeats the value the agent wrote", ta.Err)
			}
			if a.Status.Namespace != tc.written {
				t.Errorf("the input cluster was modified: status.namespace %q", a.Status.Namespace)
			}
		})
	}
}
