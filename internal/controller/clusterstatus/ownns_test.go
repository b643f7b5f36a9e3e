package clusterstatus

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

func TestOwnNamespace(t *testing.T) {
	own := names.ClusterNamespace("ws", "a")
	cases := []struct {
		name, ns string
		want     bool
	}{
		{"the manager's value", own, true},
		{"none yet, or refused (NamespaceConflict)", "", false},
		{"another cluster's namespace", names.ClusterNamespace("ws", "b"), false},
		{"any other namespace", "kube-system", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "a"}}
			cl.Status.Namespace = c.ns
			if got := ownNamespace(cl); got != c.want {
				t.Fatalf("ownNamespace(%q) = %v, want %v", c.ns, got, c.want)
			}
		})
	}
}
