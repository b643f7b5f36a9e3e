package statusview

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestHeaderNamesWorkspace: the header says which workspace was listed, so
// that a picture of the default fleet-local is not mistaken for the fleet.
func TestHeaderNamesWorkspace(t *testing.T) {
	v := Build(inMemory(seed()))
	for _, tc := range []struct {
		name string
		opts RenderOptions
		want string
	}{
		{name: "one workspace", opts: RenderOptions{Workspace: "fleet-default"}, want: "FLEET  workspace fleet-default: 2/7 bundle deployments ready, 2 clusters\n"},
		{name: "all workspaces", opts: RenderOptions{AllWorkspaces: true}, want: "FLEET  all workspaces: 2/7 bundle deployments ready, 2 clusters\n"},
		{name: "not said", opts: RenderOptions{}, want: "FLEET  2/7 bundle deployments ready, 2 clusters\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tc.opts.Now = seedNow
			if err := Render(&out, v, tc.opts); err != nil {
				t.Fatal(err)
			}
			if first, _, _ := strings.Cut(out.String(), "\n"); first+"\n" != tc.want {
				t.Errorf("header %q, want %q", first, tc.want)
			}
		})
	}
}

// TestEmptyWorkspaceHint: an empty workspace says it is empty and names the
// workspaces that hold something, instead of "none registered / No
// problems."; with -A an empty fleet keeps the usual picture.
func TestEmptyWorkspaceHint(t *testing.T) {
	render := func(opts RenderOptions) string {
		var out bytes.Buffer
		opts.Now = seedNow
		if err := Render(&out, View{}, opts); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	got := render(RenderOptions{Workspace: "fleet-local", Elsewhere: []string{"fleet-default", "team-a"}})
	want := "FLEET  workspace fleet-local: 0/0 bundle deployments ready, 0 clusters\n\n" +
		"Workspace fleet-local has no Clusters, GitRepos or HelmOps.\n" +
		"These workspaces have some: fleet-default, team-a\n" +
		"Pick one with -n fleet-default, or all of them with -A.\n"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if got := render(RenderOptions{Workspace: "fleet-local"}); !strings.Contains(got, "has no Clusters, GitRepos or HelmOps.\nPick another workspace with -n <namespace>, or all of them with -A.\n") {
		t.Errorf("without other workspaces:\n%s", got)
	}
	if got := render(RenderOptions{AllWorkspaces: true}); !strings.Contains(got, "CLUSTERS  none registered") || strings.Contains(got, "-n ") {
		t.Errorf("empty fleet with -A:\n%s", got)
	}
}

// TestWorkspacesOverRealAPIServer: the namespaces holding GitRepos, HelmOps
// or Clusters are found on a real API server, and only those.
func TestWorkspacesOverRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := upstream.Client
	for _, ns := range []string{"ws-gitrepo", "ws-helmop", "ws-cluster", "ws-empty"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ws-gitrepo"}, Spec: fleet.GitRepoSpec{Repo: "https://example.com/r"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &fleet.HelmOp{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ws-helmop"}, Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
		Helm: &fleet.HelmOptions{Chart: "c", Repo: "https://example.com/charts"}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws-cluster"}}); err != nil {
		t.Fatal(err)
	}
	got, err := Workspaces(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, ns := range got {
		has[ns] = true
	}
	for _, ns := range []string{"ws-gitrepo", "ws-helmop", "ws-cluster"} {
		if !has[ns] {
			t.Errorf("Workspaces = %v, lacks %s", got, ns)
		}
	}
	if has["ws-empty"] {
		t.Errorf("Workspaces = %v, lists the empty ws-empty", got)
	}
}
