package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestFleetYAMLAloneInPaths: a commit that removes the manifests of a
// directory the GitRepo's paths name, leaving its fleet.yaml, fails the
// build (Ready False, BuildFailed, Stalled, a Warning event) and keeps the
// deployed Bundle, as a missing path does; Rancher Fleet would skip the
// bundle and prune it. Below a glob the same directory is skipped with a
// BundleWarnings event, as in Rancher Fleet, and the other bundles applied.
func TestFleetYAMLAloneInPaths(t *testing.T) {
	ns := newNamespace(t, "fleetyaml-alone")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "apps")
	c1 := repo.Commit("master", map[string]string{
		"apps/web/fleet.yaml": "defaultNamespace: web\n",
		"apps/web/cm.yaml":    configMap("web", "1"),
		"apps/api/cm.yaml":    configMap("api", "1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})

	createRepo(t, ns, "literal", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"apps/web"}})
	createRepo(t, ns, "glob", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Paths: []string{"apps/*"}})
	waitSynced(t, ns, "literal", c1, 1)
	waitSynced(t, ns, "glob", c1, 2)
	before := bundlesOf(t, ns, "literal")

	c2 := repo.Commit("master", map[string]string{"apps/web/cm.yaml": "", "apps/api/cm.yaml": configMap("api", "2")})
	want := fmt.Sprintf(`commit %s: path "apps/web": no resources to deploy in apps/web `+
		`(a fleet.yaml alone deploys nothing: add manifests, a Helm chart or a kustomization)`, c2[:12])
	waitPathError(t, ns, "literal", want)
	assertBundlesKept(t, ns, "literal", before)
	if b := bundlesOf(t, ns, "literal")["literal-apps-web"]; b.Labels[fleet.CommitLabel] != c1 {
		t.Fatalf("bundle commit %q, want %q kept", b.Labels[fleet.CommitLabel], c1)
	}

	waitSynced(t, ns, "glob", c2, 1)
	if _, ok := bundlesOf(t, ns, "glob")["glob-apps-api"]; !ok {
		t.Fatalf("bundles %v, want glob-apps-api", keysOf(bundlesOf(t, ns, "glob")))
	}
	waitWarningEvent(t, ns, "glob", "BundleWarnings", "bundle apps/web: no resources to deploy; skipped")
}

// TestDrivenEntryWithoutResources: as in Rancher Fleet (0.14), a listed
// bundle whose directory a commit empties (its fleet.yaml left) is skipped
// with a BundleWarnings event naming it, its Bundle pruned, and the other
// entries applied; the GitRepo stays Ready.
func TestDrivenEntryWithoutResources(t *testing.T) {
	ns := newNamespace(t, "driven-empty")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "apps")
	c1 := repo.Commit("master", map[string]string{
		"web/fleet.yaml": "defaultNamespace: web\n",
		"web/cm.yaml":    configMap("web", "1"),
		"api/cm.yaml":    configMap("api", "1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	createRepo(t, ns, "drv", fleet.GitRepoSpec{Repo: srv.URLFor(repo),
		Bundles: []fleet.BundlePath{{Base: "web"}, {Base: "api"}}})
	waitSynced(t, ns, "drv", c1, 2)

	c2 := repo.Commit("master", map[string]string{"web/cm.yaml": ""})
	waitSynced(t, ns, "drv", c2, 1)
	if _, ok := bundlesOf(t, ns, "drv")["drv-api"]; !ok {
		t.Fatalf("bundles %v, want drv-api", keysOf(bundlesOf(t, ns, "drv")))
	}
	waitWarningEvent(t, ns, "drv", "BundleWarnings", "bundle web: no resources to deploy; skipped")
}

// waitWarningEvent waits for a Warning event about the GitRepo name with
// reason and a note containing s.
func waitWarningEvent(t *testing.T, ns, name, reason, s string) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Note, s) {
				return nil
			}
		}
		return fmt.Errorf("no %s event with %q among %d", reason, s, len(evs.Items))
	})
}
