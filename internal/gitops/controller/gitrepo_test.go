package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

func configMap(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, value)
}

func resourceContent(b fleet.Bundle, name string) string {
	for _, r := range b.Spec.Resources {
		if r.Name == name {
			return r.Content
		}
	}
	return ""
}

// TestGitRepoLifecycle drives one GitRepo over HTTP with basic auth through
// its life: first sync, a pushed change, a removed path, a broken commit, a
// fix, and deletion.
func TestGitRepoLifecycle(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "lifecycle")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "apps")
	c1 := repo.Commit("master", map[string]string{
		"apps/one/fleet.yaml": "defaultNamespace: one\n",
		"apps/one/cm.yaml":    configMap("one", "v1"),
		"apps/two/fleet.yaml": "defaultNamespace: two\n",
		"apps/two/cm.yaml":    configMap("two", "v1"),
		"README.md":           "not a bundle\n",
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "fleet", Password: "pa55"})
	secret(t, ns, "creds", corev1.SecretTypeBasicAuth, map[string][]byte{"username": []byte("fleet"), "password": []byte("pa55")})

	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"team": "blue"}},
		Spec: fleet.GitRepoSpec{
			Repo:             srv.URLFor(repo),
			ClientSecretName: "creds",
			Paths:            []string{"apps/*"},
			PollingInterval:  &metav1.Duration{Duration: 1e9},
			Targets:          []fleet.GitTarget{{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
		},
	}
	if err := env.Client.Create(ctx, gr); err != nil {
		t.Fatal(err)
	}

	// First sync: one Bundle per path, labelled with repo and commit, with
	// the GitRepo's targets as targets and restrictions.
	fleettest.Eventually(t, timeout, func() error {
		bs := bundlesOf(t, ns, "web")
		if len(bs) != 2 {
			return fmt.Errorf("%d bundles", len(bs))
		}
		for name, b := range bs {
			if b.Labels[fleet.CommitLabel] != c1 || b.Labels["team"] != "blue" {
				return fmt.Errorf("bundle %s labels %v", name, b.Labels)
			}
		}
		return nil
	})
	bs := bundlesOf(t, ns, "web")
	var one fleet.Bundle
	for name, b := range bs {
		if strings.Contains(name, "one") {
			one = b
		}
	}
	if !strings.Contains(resourceContent(one, "cm.yaml"), `"v1"`) || one.Spec.DefaultNamespace != "one" {
		t.Fatalf("bundle one: %+v", one.Spec)
	}
	if len(one.Spec.TargetRestrictions) != 1 || one.Spec.TargetRestrictions[0].ClusterSelector.MatchLabels["env"] != "prod" ||
		!slices.ContainsFunc(one.Spec.Targets, func(t fleet.BundleTarget) bool { return t.Name == "prod" }) {
		t.Fatalf("targets %+v restrictions %+v", one.Spec.Targets, one.Spec.TargetRestrictions)
	}
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "web")
		if r.Status.Commit != c1 || r.Status.Display.ReadyBundleDeployments != "0/0" {
			return fmt.Errorf("status commit %q display %q", r.Status.Commit, r.Status.Display.ReadyBundleDeployments)
		}
		for _, typ := range []string{fleet.ConditionAccepted, fleet.ConditionGitPolling, fleet.ConditionReady} {
			if c := condition(r, typ); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("%s = %+v", typ, c)
			}
		}
		if c := condition(r, fleet.ConditionStalled); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("stalled = %+v", c)
		}
		if !slices.Contains(r.Finalizers, "fleet.cattle.io/gitrepo-finalizer") {
			return fmt.Errorf("finalizers %v", r.Finalizers)
		}
		return nil
	})

	// A pushed commit updates the Bundles.
	c2 := repo.Commit("master", map[string]string{"apps/one/cm.yaml": configMap("one", "v2")})
	fleettest.Eventually(t, timeout, func() error {
		for name, b := range bundlesOf(t, ns, "web") {
			if b.Labels[fleet.CommitLabel] != c2 {
				return fmt.Errorf("bundle %s at %s", name, b.Labels[fleet.CommitLabel])
			}
			if strings.Contains(name, "one") && !strings.Contains(resourceContent(b, "cm.yaml"), `"v2"`) {
				return fmt.Errorf("bundle one not updated")
			}
		}
		return nil
	})

	// Removing a path prunes its Bundle.
	repo.RemovePath("apps/two")
	c3 := repo.Commit("master", nil)
	fleettest.Eventually(t, timeout, func() error {
		bs := bundlesOf(t, ns, "web")
		if len(bs) != 1 {
			return fmt.Errorf("%d bundles", len(bs))
		}
		for name, b := range bs {
			if !strings.Contains(name, "one") || b.Labels[fleet.CommitLabel] != c3 {
				return fmt.Errorf("left %s at %s", name, b.Labels[fleet.CommitLabel])
			}
		}
		return nil
	})

	// A broken commit keeps the last good Bundles and shows the error.
	broken := repo.Commit("master", map[string]string{"apps/one/fleet.yaml": "defaultNamespace: [unclosed\n", "apps/three/cm.yaml": configMap("three", "x")})
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "web")
		if r.Status.PollingCommit != broken {
			return fmt.Errorf("polling commit %q", r.Status.PollingCommit)
		}
		c := condition(r, fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "fleet.yaml") {
			return fmt.Errorf("ready = %+v", c)
		}
		if s := condition(r, fleet.ConditionStalled); s == nil || s.Status != metav1.ConditionTrue {
			return fmt.Errorf("stalled = %+v", s)
		}
		if r.Status.Commit != c3 {
			return fmt.Errorf("status commit moved to %q", r.Status.Commit)
		}
		return nil
	})
	bs = bundlesOf(t, ns, "web")
	if len(bs) != 1 {
		t.Fatalf("broken commit changed bundles: %d", len(bs))
	}
	for _, b := range bs {
		if b.Labels[fleet.CommitLabel] != c3 || b.DeletionTimestamp != nil {
			t.Fatalf("broken commit touched bundle %s: %v", b.Name, b.Labels)
		}
	}

	// Fixing it recovers.
	fixed := repo.Commit("master", map[string]string{"apps/one/fleet.yaml": "defaultNamespace: one\n", "apps/three/fleet.yaml": "defaultNamespace: three\n"})
	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "web")
		if c := condition(r, fleet.ConditionReady); r.Status.Commit != fixed || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("commit %q ready %+v", r.Status.Commit, c)
		}
		if n := len(bundlesOf(t, ns, "web")); n != 2 {
			return fmt.Errorf("%d bundles", n)
		}
		return nil
	})

	// Events were recorded for the new commits, the failure and the recovery.
	fleettest.Eventually(t, timeout, func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		seen := map[string]int{}
		for _, e := range evs.Items {
			if e.Regarding.Name == "web" {
				seen[e.Reason]++
			}
		}
		// BuildFailed and Recovered are recorded once each however often the
		// broken commit is retried and however stale the cache is.
		if seen["GotNewCommit"] < 4 || seen["BuildFailed"] != 1 || seen["Recovered"] != 1 {
			return fmt.Errorf("events %v", seen)
		}
		return nil
	})

	// Deleting the GitRepo deletes its Bundles.
	if err := env.Client.Delete(ctx, gr); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		if n := len(bundlesOf(t, ns, "web")); n != 0 {
			return fmt.Errorf("%d bundles left", n)
		}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(gr), &fleet.GitRepo{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("gitrepo still there: %v", err)
		}
		return nil
	})
}
