package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// helmOpDeploys: a HelmOp with a version range lands its chart on the
// downstream cluster with the HelmOp's values, reports Ready with the
// version, and rolls a newer matching release out by polling.
func helmOpDeploys(t *testing.T, ctx context.Context, ws string) {
	g := NewWithT(t)
	up, down := upstream.Client, downstream.Client
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "greeter", "1.0.0"))

	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "greeter"},
		Spec: fleet.HelmOpSpec{
			BundleSpec: fleet.BundleSpec{
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{
					DefaultNamespace: "e2e-helmop",
					Helm: &fleet.HelmOptions{Repo: repo.URL, Chart: "greeter", Version: "~1.0.0",
						Values: &fleet.GenericMap{Data: map[string]interface{}{"greeting": "from a HelmOp"}}},
				},
				Targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}},
			},
			PollingInterval: &metav1.Duration{Duration: time.Second},
		},
	}
	g.Expect(up.Create(ctx, op)).To(Succeed())

	downstreamVersion := func(g Gomega) string {
		cm := &corev1.ConfigMap{}
		g.Expect(down.Get(ctx, client.ObjectKey{Namespace: "e2e-helmop", Name: "greeter"}, cm)).To(Succeed())
		g.Expect(cm.Data["greeting"]).To(Equal("from a HelmOp"))
		return cm.Data["version"]
	}
	g.Eventually(func(g Gomega) {
		g.Expect(downstreamVersion(g)).To(Equal("1.0.0"))
		got := &fleet.HelmOp{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(op), got)).To(Succeed())
		g.Expect(got.Status.Version).To(Equal("1.0.0"))
		g.Expect(got.Status.Display.ReadyBundleDeployments).To(Equal("1/1"))
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, fleet.ConditionReady)).To(BeTrue())
	}, 120*time.Second, 500*time.Millisecond).Should(Succeed())

	// The manager polls at its floor (10 s); the agent upgrades the release.
	repo.Publish(t, helmrepo.Chart(t, "greeter", "1.0.1"))
	g.Eventually(func(g Gomega) {
		g.Expect(downstreamVersion(g)).To(Equal("1.0.1"))
	}, 120*time.Second, 500*time.Millisecond).Should(Succeed())
}
