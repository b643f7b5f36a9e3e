package operations

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/names"
)

// TestLeaderElectionHandsOver: two replicas compete for the shard's Lease;
// only the holder works; when it stops, the other takes the Lease and the
// work goes on.
func TestLeaderElectionHandsOver(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up := upstream.Client
	const ns, leaseNS, shard = "leader", "leader-system", "le"
	// The namespace registration gives the cluster (set here by hand: the
	// unsharded replica, when it runs, computes the same).
	clusterNS := names.ClusterNamespace(ns, "c1")
	for _, n := range []string{ns, leaseNS, clusterNS} {
		g.Expect(up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})).To(Succeed())
	}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1", Labels: map[string]string{"env": "le"}}}
	g.Expect(up.Create(ctx, c)).To(Succeed())
	c.Status.Namespace = clusterNS
	g.Expect(up.Status().Update(ctx, c)).To(Succeed())
	newBundle := func(name string) {
		g.Expect(up.Create(ctx, &fleet.Bundle{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: shardLabels(shard)},
			Spec: fleet.BundleSpec{
				Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: configMap(name, "x")}},
				Targets:   []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "le"}}}},
			},
		})).To(Succeed())
	}
	opts := manager.Options{
		ShardID: shard, LeaderElection: true, LeaderElectionNamespace: leaseNS,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}
	holder := func(g Gomega) string {
		l := &coordinationv1.Lease{}
		g.Expect(up.Get(ctx, client.ObjectKey{Namespace: leaseNS, Name: "fleet-controller-leader-election-shard-" + shard}, l)).To(Succeed())
		if l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}

	// Replica 1 alone takes the Lease and works.
	ctx1, stop1 := context.WithCancel(ctx)
	defer stop1()
	startManager(ctx1, g, opts)
	var first string
	g.Eventually(func(g Gomega) string { first = holder(g); return first }, wait, tick).ShouldNot(BeEmpty())
	newBundle("before")
	g.Eventually(func(g Gomega) bool { return processed(ctx, g, ns, "before") }, wait, tick).Should(BeTrue())

	// Replica 2 joins as a standby: the Lease stays with replica 1.
	startManager(ctx, g, opts)
	g.Consistently(holder, 3*time.Second, tick).Should(Equal(first))

	// Replica 1 stops: replica 2 takes over and does the work.
	stop1()
	g.Eventually(holder, wait, tick).Should(And(Not(BeEmpty()), Not(Equal(first))))
	newBundle("after")
	g.Eventually(func(g Gomega) bool { return processed(ctx, g, ns, "after") }, wait, tick).Should(BeTrue())
}
