package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestGitRepoDrivenScan: spec.bundles replaces the scan of paths with the
// listed directories, one directory deployed once per options file; changing
// the list prunes the bundle no longer listed, and a listed options file that
// a commit removes fails the sync without touching the Bundles.
func TestGitRepoDrivenScan(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "driven")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "driven")
	c1 := repo.Commit("master", map[string]string{
		"app/base/kustomization.yaml":         "resources: [cm.yaml]\n",
		"app/base/cm.yaml":                    configMap("app", "v1"),
		"app/overlays/dev/kustomization.yaml": "resources: [../../base]\nnamePrefix: dev-\n",
		"app/overlays/prd/kustomization.yaml": "resources: [../../base]\nnamePrefix: prd-\n",
		"app/dev.yaml":                        "defaultNamespace: dev\nkustomize:\n  dir: overlays/dev\nnamepsace: typo\n",
		"app/prd.yaml":                        "defaultNamespace: prd\nkustomize:\n  dir: overlays/prd\n",
		// Not listed: a scan of paths would have made it a bundle.
		"other/fleet.yaml": "{}\n",
		"other/cm.yaml":    configMap("other", "v1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})

	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drv"},
		Spec: fleet.GitRepoSpec{
			Repo:            srv.URLFor(repo),
			Paths:           []string{"other"},
			PollingInterval: &metav1.Duration{Duration: 1e9},
			// Accepted for compatibility and ignored, with a warning event.
			OCIRegistrySecret: "oci-storage",
			Bundles: []fleet.BundlePath{
				{Base: "app", Options: "dev.yaml"},
				{Base: "app", Options: "prd.yaml"},
			},
		},
	}
	if err := env.Client.Create(ctx, gr); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		bs := bundlesOf(t, ns, "drv")
		if len(bs) != 2 {
			return fmt.Errorf("bundles %v", keysOf(bs))
		}
		dev, ok := bs["drv-app-dev"]
		if !ok || dev.Labels[fleet.CommitLabel] != c1 {
			return fmt.Errorf("bundles %v", keysOf(bs))
		}
		if dev.Spec.DefaultNamespace != "dev" || dev.Spec.Kustomize == nil || dev.Spec.Kustomize.Dir != "overlays/dev" {
			return fmt.Errorf("drv-app-dev options %+v", dev.Spec.BundleDeploymentOptions)
		}
		for _, r := range dev.Spec.Resources {
			if r.Name == "dev.yaml" || r.Name == "prd.yaml" {
				return fmt.Errorf("options file %s is a resource", r.Name)
			}
		}
		if prd := bs["drv-app-prd"]; prd.Spec.DefaultNamespace != "prd" {
			return fmt.Errorf("drv-app-prd options %+v", prd.Spec.BundleDeploymentOptions)
		}
		return nil
	})

	fleettest.Eventually(t, timeout, func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		seen := map[string]string{}
		for _, e := range evs.Items {
			if e.Regarding.Name == "drv" && e.Type == "Warning" {
				seen[e.Reason] = e.Note
			}
		}
		if _, ok := seen["OCIStorageUnsupported"]; !ok {
			return fmt.Errorf("no OCIStorageUnsupported event: %v", seen)
		}
		// A fleet.yaml warning reaches the user, not only the log.
		if w := seen["BundleWarnings"]; !strings.Contains(w, `app/dev.yaml: unknown key "namepsace"`) {
			return fmt.Errorf("bundle warnings event %q", w)
		}
		return nil
	})

	// Dropping an entry prunes its Bundle.
	patchRepo(t, ns, "drv", func(r *fleet.GitRepo) { r.Spec.Bundles = r.Spec.Bundles[:1] })
	fleettest.Eventually(t, timeout, func() error {
		if bs := bundlesOf(t, ns, "drv"); len(bs) != 1 || bs["drv-app-dev"].Name == "" {
			return fmt.Errorf("bundles %v", keysOf(bs))
		}
		return nil
	})

	// A commit without the listed options file is an error on the GitRepo,
	// and the deployed Bundle stays.
	repo.RemovePath("app/dev.yaml")
	broken := repo.Commit("master", nil)
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "drv")
		c := condition(r, fleet.ConditionReady)
		if r.Status.PollingCommit != broken || c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "app/dev.yaml does not exist") {
			return fmt.Errorf("polling %q ready %+v", r.Status.PollingCommit, c)
		}
		return nil
	})
	bs := bundlesOf(t, ns, "drv")
	if dev := bs["drv-app-dev"]; len(bs) != 1 || dev.Labels[fleet.CommitLabel] != c1 || dev.DeletionTimestamp != nil {
		t.Fatalf("the broken commit touched the bundles: %v", keysOf(bs))
	}
}

func keysOf(m map[string]fleet.Bundle) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func patchRepo(t *testing.T, ns, name string, mutate func(*fleet.GitRepo)) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, name)
		mutate(r)
		return env.Client.Update(context.Background(), r)
	})
}
