package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// TestDrivenScanToDownstream: a GitRepo's spec.bundles deploys a kustomize
// overlay whose options file is the overlay's own fleet.yaml (a directory
// the classic scan would make a bundle of its own), as Rancher Fleet does.
// When a commit leaves another listed directory without resources, that
// entry is skipped with a BundleWarnings event rather than failing the
// GitRepo: its old Bundle is pruned and its objects removed downstream,
// while the overlay keeps running and the commit is applied. It has its own
// downstream cluster and workspace, as TestKeepResourcesSetWhileRepoUnreachable.
func TestDrivenScanToDownstream(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const wait, poll = 120 * time.Second, 500 * time.Millisecond
	down, ws := startIsolated(t, ctx, "driven")
	up := upstream.Client

	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "driven")
	repo.Commit("master", map[string]string{
		"app/base/kustomization.yaml":         "resources: [cm.yaml]\n",
		"app/base/cm.yaml":                    configMap("app", "v1"),
		"app/overlays/dev/kustomization.yaml": "resources: [../../base]\nnamePrefix: dev-\n",
		// Paths in an options file are relative to the base, wherever the
		// file lies.
		"app/overlays/dev/fleet.yaml": "defaultNamespace: dev\nkustomize:\n  dir: overlays/dev\n",
		"extra/fleet.yaml":            "defaultNamespace: extra\n",
		"extra/cm.yaml":               configMap("extra", "v1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "driven"},
		Spec: fleet.GitRepoSpec{
			Repo:            srv.URLFor(repo),
			PollingInterval: &metav1.Duration{Duration: time.Second},
			Targets:         []fleet.GitTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "driven"}}}},
			Bundles: []fleet.BundlePath{
				{Base: "app", Options: "overlays/dev/fleet.yaml"},
				{Base: "extra"},
			},
		},
	}
	g.Expect(up.Create(ctx, gr)).To(Succeed())

	value := func(ns, name string) func(g Gomega) string {
		return func(g Gomega) string {
			cm := &corev1.ConfigMap{}
			g.Expect(down.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm)).To(Succeed())
			return cm.Data["value"]
		}
	}
	// The overlay was built by the agent from the whole base.
	g.Eventually(value("dev", "dev-app"), wait, poll).Should(Equal("v1"))
	g.Eventually(value("extra", "extra"), wait, poll).Should(Equal("v1"))

	// extra loses its only resource: the sync goes on without it.
	repo.RemovePath("extra/cm.yaml")
	emptied := repo.Commit("master", map[string]string{"app/base/cm.yaml": configMap("app", "v2")})
	g.Eventually(value("dev", "dev-app"), wait, poll).Should(Equal("v2"))
	g.Eventually(func(g Gomega) {
		r := &fleet.GitRepo{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(gr), r)).To(Succeed())
		g.Expect(r.Status.Commit).To(Equal(emptied))
		bundles := &fleet.BundleList{}
		g.Expect(up.List(ctx, bundles, client.InNamespace(ws), client.MatchingLabels{fleet.RepoLabel: gr.Name})).To(Succeed())
		var names []string
		for _, b := range bundles.Items {
			if b.DeletionTimestamp == nil {
				names = append(names, b.Name)
			}
		}
		g.Expect(names).To(ConsistOf("driven-app-overlays-dev-fleet"))
	}, wait, poll).Should(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(down.Client.Get(ctx, client.ObjectKey{Namespace: "extra", Name: "extra"}, &corev1.ConfigMap{}))
	}, wait, poll).Should(BeTrue())

	// The user is told why, on the GitRepo's events.
	g.Eventually(func(g Gomega) {
		evs := &eventsv1.EventList{}
		g.Expect(up.List(ctx, evs, client.InNamespace(ws))).To(Succeed())
		var notes []string
		for _, e := range evs.Items {
			if e.Regarding.Name == gr.Name && e.Type == corev1.EventTypeWarning && e.Reason == "BundleWarnings" {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).To(ContainElement(ContainSubstring("bundle extra: no resources to deploy; skipped")))
	}, wait, poll).Should(Succeed())
}
