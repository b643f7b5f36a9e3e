package target

import (
	"errors"
	"math/rand"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestUnknownGroupsFollowsSelectionOrder: an invalid group stalls the
// bundle only when the answer for a cluster depends on it, in the order
// Compute decides: first matching target, any matching restriction,
// customizations and partitions of a targeted cluster only.
func TestUnknownGroupsFollowsSelectionOrder(t *testing.T) {
	groups := []*fleet.ClusterGroup{group("default", nil, map[string]string{"env": "prod"}), badGroup("bad", map[string]string{"kind": "x"})}
	dnd := fleet.BundleTarget{ClusterGroup: "bad"}
	dnd.DoNotDeploy = true
	now := metav1.Now()
	deleting := cluster("gone", withLabels("env", "prod"))
	deleting.DeletionTimestamp = &now
	tests := []struct {
		name    string
		targets []fleet.BundleTarget
		restr   []fleet.BundleTargetRestriction
		parts   []fleet.Partition
		mode    string
		cluster *fleet.Cluster
		stalled bool
	}{
		{name: "S1 first target matches by label, a later one names the group",
			targets: []fleet.BundleTarget{{ClusterSelector: sel("env", "prod")}, {ClusterGroup: "bad"}}},
		{name: "S1b first target matches by a valid group, a later one names the group",
			targets: []fleet.BundleTarget{{ClusterGroup: "default"}, {ClusterGroup: "bad"}}},
		{name: "S1c target naming the group comes first", stalled: true,
			targets: []fleet.BundleTarget{{ClusterGroup: "bad"}, {ClusterSelector: sel("env", "prod")}}},
		{name: "S2 targets do not use the group", targets: []fleet.BundleTarget{{ClusterGroup: "default"}}},
		{name: "S3 restriction 0 matches, restriction 1 names the group",
			targets: []fleet.BundleTarget{{ClusterSelector: sel("env", "prod")}, {ClusterSelector: sel("env", "prod")}},
			restr:   []fleet.BundleTargetRestriction{{ClusterGroup: "default"}, {ClusterGroup: "bad"}}},
		{name: "S3b only the restriction naming the group can let it in", stalled: true,
			targets: []fleet.BundleTarget{{ClusterSelector: sel("env", "prod")}},
			restr:   []fleet.BundleTargetRestriction{{ClusterName: "other"}, {ClusterGroup: "bad"}}},
		{name: "S4 doNotDeploy through the group comes first", stalled: true,
			targets: []fleet.BundleTarget{dnd, {ClusterSelector: &metav1.LabelSelector{}}}},
		{name: "S4b doNotDeploy target matched first, the group cannot change it",
			targets: []fleet.BundleTarget{{ClusterName: "a", DoNotDeploy: true}, {ClusterGroup: "bad"}}},
		{name: "S5 clusterGroupSelector {} fits only the group", stalled: true, cluster: cluster("a", withLabels("env", "dev")),
			targets: []fleet.BundleTarget{{ClusterGroupSelector: &metav1.LabelSelector{}}}},
		{name: "S5b clusterGroupSelector {} fits a valid group too", targets: []fleet.BundleTarget{{ClusterGroupSelector: &metav1.LabelSelector{}}}},
		{name: "S6 deleting cluster", cluster: deleting, targets: []fleet.BundleTarget{{ClusterGroup: "bad"}}},
		{name: "partition of a targeted cluster names the group", stalled: true,
			targets: []fleet.BundleTarget{{ClusterSelector: sel("env", "prod")}}, parts: []fleet.Partition{{Name: "p", ClusterGroup: "bad"}}},
		{name: "partition of an untargeted cluster names the group",
			targets: []fleet.BundleTarget{{ClusterName: "other"}}, parts: []fleet.Partition{{Name: "p", ClusterGroup: "bad"}}},
		{name: "customization after the first matching one (first match mode)",
			targets: []fleet.BundleTarget{{ClusterName: "a"}, {ClusterGroup: "bad"}, {ClusterSelector: sel("env", "prod")}},
			restr:   []fleet.BundleTargetRestriction{{ClusterName: "a"}}},
		{name: "customization naming the group with AllMatches", stalled: true, mode: string(fleet.AllMatches),
			targets: []fleet.BundleTarget{{ClusterName: "a"}, {ClusterGroup: "bad"}, {ClusterSelector: sel("env", "prod")}},
			restr:   []fleet.BundleTargetRestriction{{ClusterName: "a"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app"}}
			b.Spec.Targets, b.Spec.TargetRestrictions = tc.targets, tc.restr
			b.Spec.TargetCustomizationMode = fleet.TargetCustomizationMode(tc.mode)
			if tc.parts != nil {
				b.Spec.RolloutStrategy = &fleet.RolloutStrategy{Partitions: tc.parts}
			}
			c := tc.cluster
			if c == nil {
				c = cluster("a", withLabels("env", "prod"))
			}
			err := UnknownGroups(b, infos(groups, c))
			if !tc.stalled {
				if err != nil {
					t.Fatalf("stalled: %v", err)
				}
				return
			}
			var ue *UnknownGroupError
			if !errors.As(err, &ue) || ue.Group.Name != "bad" || !strings.Contains(err.Error(), "cluster ws/a is targeted depends on it") {
				t.Fatalf("error = %v, want the bad group deciding cluster ws/a", err)
			}
		})
	}
}

// TestUnknownGroupsMessageIsStable: the cluster and group named do not
// depend on the order of clusters or groups (a cache's), so a stalled
// bundle's status is not rewritten on each reconcile.
func TestUnknownGroupsMessageIsStable(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app"}}
	b.Spec.Targets = []fleet.BundleTarget{{ClusterGroupSelector: &metav1.LabelSelector{}}}
	groups := []*fleet.ClusterGroup{badGroup("bad-z", nil), badGroup("bad-a", nil), badGroup("bad-m", nil)}
	var clusters []*fleet.Cluster
	for _, n := range []string{"m", "c", "z", "b", "q", "x"} {
		clusters = append(clusters, cluster(n))
	}
	want := "ClusterGroup ws/bad-a"
	first := ""
	rnd := rand.New(rand.NewSource(1))
	for i := 0; i < 20; i++ {
		rnd.Shuffle(len(clusters), func(i, j int) { clusters[i], clusters[j] = clusters[j], clusters[i] })
		rnd.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
		err := UnknownGroups(b, infos(groups, clusters...))
		if err == nil {
			t.Fatal("not stalled")
		}
		if first == "" {
			first = err.Error()
			if !strings.HasPrefix(first, want) || !strings.Contains(first, "cluster ws/b is targeted") {
				t.Fatalf("message %q, want %s and cluster ws/b", first, want)
			}
		}
		if err.Error() != first {
			t.Fatalf("message changed with the order:\n%s\n%s", first, err)
		}
	}
}

// TestMatchAnyCountsPartitions: a bundle stalled through a partition's
// invalid group is re-evaluated when a cluster that may be in it changes.
func TestMatchAnyCountsPartitions(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app"}}
	b.Spec.Targets = []fleet.BundleTarget{{ClusterName: "other"}}
	b.Spec.RolloutStrategy = &fleet.RolloutStrategy{Partitions: []fleet.Partition{{Name: "p", ClusterGroup: "bad"}}}
	bm, err := NewBundleMatcher(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bm.MatchAny(infos([]*fleet.ClusterGroup{badGroup("bad", nil)}, cluster("a"))[0]) {
		t.Fatal("MatchAny = false for a cluster a partition may choose through the invalid group")
	}
}

// TestMatchAnyIgnoresPartitionOnlyMatch: a valid partition matching a
// cluster no target selects does not make the cluster's events reconcile
// the bundle.
func TestMatchAnyIgnoresPartitionOnlyMatch(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app"}}
	b.Spec.Targets = []fleet.BundleTarget{{ClusterName: "other"}}
	b.Spec.RolloutStrategy = &fleet.RolloutStrategy{Partitions: []fleet.Partition{{Name: "p", ClusterSelector: &metav1.LabelSelector{}}}}
	bm, err := NewBundleMatcher(b)
	if err != nil {
		t.Fatal(err)
	}
	if bm.MatchAny(infos(nil, cluster("a"))[0]) {
		t.Fatal("MatchAny = true for a cluster only a partition matches")
	}
	if !bm.MatchAny(infos(nil, cluster("other"))[0]) {
		t.Fatal("MatchAny = false for the targeted cluster")
	}
}
