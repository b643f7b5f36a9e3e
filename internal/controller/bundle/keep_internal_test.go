package bundle

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// TestKeeps: which targets keep the bundle's deployment in their cluster
// namespace. A failed target (no status.namespace, a rewritten one, a
// template error) keeps its own deployment, never another cluster's.
func TestKeeps(t *testing.T) {
	cl := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "b"}}
	bdOf := func(ws, name string) *fleet.BundleDeployment {
		l := map[string]string{}
		if ws != "" {
			l[fleet.ClusterNamespaceLabel] = ws
		}
		if name != "" {
			l[fleet.ClusterLabel] = name
		}
		return &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Labels: l}}
	}
	failed := errors.New("cluster has no namespace yet")
	cases := []struct {
		name    string
		err     error
		bd      *fleet.BundleDeployment
		want    bool
		refused bool
	}{
		{name: "deploying target, its own deployment", err: nil, bd: bdOf("ws", "b"), want: true},
		{name: "deploying target, none yet", err: nil, bd: nil, want: true},
		{name: "failed target, none there", err: failed, bd: nil, want: true},
		{name: "failed target, its own deployment", err: failed, bd: bdOf("ws", "b"), want: true},
		{name: "failed target, deployment without cluster labels", err: failed, bd: bdOf("", ""), want: true},
		{name: "failed target, another cluster's deployment", err: failed, bd: bdOf("ws", "a"), want: false},
		{name: "failed target, same name in another workspace", err: failed, bd: bdOf("other", "b"), want: false},
		{name: "failed target, only the name label, another", err: failed, bd: bdOf("", "a"), want: false},
		{name: "refused target, its own deployment in the owner's namespace", err: failed, bd: bdOf("ws", "b"), refused: true},
		{name: "refused target, the owner's deployment", err: failed, bd: bdOf("ws", "a"), refused: true},
		{name: "refused target, deployment without cluster labels", err: failed, bd: bdOf("", ""), refused: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := keeps(&target.Target{Cluster: cl, Err: c.err, Refused: c.refused}, c.bd); got != c.want {
				t.Fatalf("keeps = %v, want %v", got, c.want)
			}
		})
	}
}

// TestDeploymentLabelsCattleKeys: Bundle labels are copied as Fleet
// (wrangler's CleanAnnotationsForExport) copies them: only keys containing
// "cattle.io/" are Rancher-internal and dropped, every fleet.cattle.io/*
// key is copied, and the manager's own labels win.
func TestDeploymentLabelsCattleKeys(t *testing.T) {
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ws"}}
	cases := []struct {
		key  string
		kept bool
	}{
		{"provider.cattle.io", true},
		{"example.com/cattle.io-owner", true},
		{"cattle.io", true},
		{"team", true},
		{"objectset.rio.cattle.io/hash", false},
		{"management.cattle.io/cluster-display-name", false},
		{"cattle.io/creator", false},
		{"kubectl.kubernetes.io/last-applied-configuration", false},
		{fleet.RepoLabel, true},
		{"fleet.cattle.io/custom", true},
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ws", Labels: map[string]string{tc.key: "v"}}}
			got := DeploymentLabels(b, c, "s-1")
			if _, ok := got[tc.key]; ok != tc.kept {
				t.Fatalf("label %s copied = %v, want %v (labels %v)", tc.key, ok, tc.kept, got)
			}
		})
	}
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ws", Labels: map[string]string{fleet.ClusterLabel: "other"}}}
	if got := DeploymentLabels(b, c, "s-1")[fleet.ClusterLabel]; got != "c1" {
		t.Fatalf("%s = %q, want the cluster's name c1", fleet.ClusterLabel, got)
	}
}
