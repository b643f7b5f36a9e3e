package registration_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestBootstrapClusterLabelsAndGitRepo: the chart's bootstrap.clusterLabels
// and bootstrap.repo/secret/branch/paths give Cluster "local" its labels
// and make GitRepo "bootstrap", and each start converges both to the
// values as Rancher Fleet's bootstrap does: values changed by hand are set
// back, what the values no longer ask for is removed (the GitRepo itself
// once bootstrap.repo is emptied), and what users added stays.
func TestBootstrapClusterLabelsAndGitRepo(t *testing.T) {
	ctx := context.Background()
	c := up.Client
	ns := "bootstrap-values"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	start := func(labels map[string]string, repo registration.BootstrapRepo) {
		t.Helper()
		opts := registration.Options{BootstrapNamespace: ns, BootstrapClusterLabels: labels, BootstrapRepo: repo}
		if err := registration.EnsureLocalObjects(ctx, c, opts); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
	}
	cluster := func() *fleet.Cluster {
		t.Helper()
		cl := &fleet.Cluster{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.LocalClusterName}, cl); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	gitRepo := func() *fleet.GitRepo {
		t.Helper()
		g := &fleet.GitRepo{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bootstrap"}, g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	wantLabels := func(want map[string]string) {
		t.Helper()
		if got := cluster().Labels; !maps.Equal(got, want) {
			t.Fatalf("cluster local labels %v, want %v", got, want)
		}
	}
	wantRepo := func(repo, branch, secret string, paths []string, polling string) {
		t.Helper()
		g := gitRepo()
		s := g.Spec
		var gotPolling string
		if s.PollingInterval != nil {
			gotPolling = s.PollingInterval.Duration.String()
		}
		if s.Repo != repo || s.Branch != branch || s.ClientSecretName != secret || !slices.Equal(s.Paths, paths) || gotPolling != polling {
			t.Fatalf("GitRepo bootstrap: repo %q branch %q clientSecretName %q paths %q pollingInterval %q, want %q %q %q %q %q",
				s.Repo, s.Branch, s.ClientSecretName, s.Paths, gotPolling, repo, branch, secret, paths, polling)
		}
	}

	// First start: Rancher's values, paths as a comma-separated string;
	// a clusterLabels "name" does not replace name=local.
	repoA := registration.BootstrapRepo{Repo: "https://example.com/fleet-a.git", Secret: "git-auth", Paths: "clusters/local, fleet-config"}
	start(map[string]string{"env": "prod", "team": "a", "name": "other"}, repoA)
	wantLabels(map[string]string{"name": "local", "env": "prod", "team": "a"})
	wantRepo(repoA.Repo, "master", "git-auth", []string{"clusters/local", "fleet-config"}, "")
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.DefaultClusterGroup}, &fleet.ClusterGroup{}); err != nil {
		t.Fatalf("cluster group default: %v", err)
	}

	// A user edits both by hand (the manager of the package may update
	// Cluster "local" meanwhile: retried on conflicts).
	byHand := client.FieldOwner("kubectl-edit")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cl := cluster()
		cl.Labels["team"] = "b"
		cl.Labels["owner"] = "me"
		return c.Update(ctx, cl, byHand)
	}); err != nil {
		t.Fatal(err)
	}
	g := gitRepo()
	g.Spec.Repo = "https://example.com/by-hand.git"
	g.Spec.PollingInterval = &metav1.Duration{Duration: time.Minute}
	if err := c.Update(ctx, g, byHand); err != nil {
		t.Fatal(err)
	}

	// Next start with the same values: what the values set is set back,
	// what the user added stays.
	start(map[string]string{"env": "prod", "team": "a", "name": "other"}, repoA)
	wantLabels(map[string]string{"name": "local", "env": "prod", "team": "a", "owner": "me"})
	wantRepo(repoA.Repo, "master", "git-auth", []string{"clusters/local", "fleet-config"}, "1m0s")

	// The admin changes the values: a dropped label key, the dropped
	// secret and paths are removed; the user's additions stay.
	repoB := registration.BootstrapRepo{Repo: "https://example.com/fleet-b.git", Branch: "main"}
	start(map[string]string{"env": "staging"}, repoB)
	wantLabels(map[string]string{"name": "local", "env": "staging", "owner": "me"})
	wantRepo(repoB.Repo, "main", "", nil, "1m0s")

	// Unsetting bootstrap.repo deletes the GitRepo the bootstrap applied,
	// as Rancher Fleet does (TestBootstrapRepoEmptied has the details).
	start(nil, registration.BootstrapRepo{})
	wantLabels(map[string]string{"name": "local", "owner": "me"})
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bootstrap"}, &fleet.GitRepo{}); !apierrors.IsNotFound(err) {
		t.Fatalf("GitRepo bootstrap after bootstrap.repo was emptied: err = %v, want NotFound", err)
	}
}

// TestBootstrapLeavesOutInvalidLabels: a clusterLabels entry the API
// server would refuse is left out, and the bootstrap still succeeds: the
// valid labels are applied and ClusterGroup "default" exists, instead of a
// bootstrap retrying for good without either.
func TestBootstrapLeavesOutInvalidLabels(t *testing.T) {
	ctx := context.Background()
	c := up.Client
	ns := "bootstrap-badlabels"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"env": "prod", "bad key": "x", "long": strings.Repeat("a", 64), "build": "2.0240101e+07"}
	opts := registration.Options{BootstrapNamespace: ns, BootstrapClusterLabels: labels}
	if err := registration.EnsureLocalObjects(ctx, c, opts); err != nil {
		t.Fatalf("bootstrap with invalid labels: %v", err)
	}
	cl := &fleet.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.LocalClusterName}, cl); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"name": "local", "env": "prod"}; !maps.Equal(cl.Labels, want) {
		t.Fatalf("cluster local labels %v, want %v", cl.Labels, want)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.DefaultClusterGroup}, &fleet.ClusterGroup{}); err != nil {
		t.Fatalf("ClusterGroup default: %v", err)
	}
}
