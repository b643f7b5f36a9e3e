package registration

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestSplitPaths: bootstrap.paths is split at commas as Rancher Fleet
// does, blanks around entries and empty entries dropped.
func TestSplitPaths(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "one", want: []string{"one"}},
		{in: "a,b", want: []string{"a", "b"}},
		{in: " a , b ,c", want: []string{"a", "b", "c"}},
		{in: "a,,b,", want: []string{"a", "b"}},
		{in: "dir with space/x, y", want: []string{"dir with space/x", "y"}},
	} {
		if got := splitPaths(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("splitPaths(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestLocalClusterLabels: clusterLabels are added to name=local, which a
// clusterLabels entry "name" cannot replace (ClusterGroup "default"
// selects name=local).
func TestLocalClusterLabels(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]string
		want  map[string]string
	}{
		{name: "none", want: map[string]string{"name": "local"}},
		{name: "added", extra: map[string]string{"env": "prod", "example.com/team": "a"},
			want: map[string]string{"name": "local", "env": "prod", "example.com/team": "a"}},
		{name: "name kept", extra: map[string]string{"name": "other", "env": "dev"},
			want: map[string]string{"name": "local", "env": "dev"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := localCluster("fleet-local", tc.extra, "")
			got := u.GetLabels()
			if len(got) != len(tc.want) {
				t.Fatalf("labels %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("labels %v, want %v", got, tc.want)
				}
			}
			// Only the labels: the apply must not take any other field.
			if _, ok := u.Object["spec"]; ok || u.GetKind() != "Cluster" || u.GetName() != "local" || u.GetNamespace() != "fleet-local" {
				t.Errorf("apply configuration %v", u.Object)
			}
		})
	}
}

// TestBootstrapGitRepo: the GitRepo holds only what the chart sets; branch
// defaults to master; no secret, no paths: no such fields.
func TestBootstrapGitRepo(t *testing.T) {
	u := bootstrapGitRepo("fleet-local", BootstrapRepo{Repo: "https://example.com/r.git"})
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	if len(spec) != 2 || spec["repo"] != "https://example.com/r.git" || spec["branch"] != "master" {
		t.Errorf("spec %v, want repo and branch master only", spec)
	}
	u = bootstrapGitRepo("fleet-local", BootstrapRepo{Repo: "r", Secret: "s", Branch: "main", Paths: "a, b"})
	paths, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "paths")
	if secret, _, _ := unstructured.NestedString(u.Object, "spec", "clientSecretName"); secret != "s" || !slices.Equal(paths, []string{"a", "b"}) {
		t.Errorf("spec %v", u.Object["spec"])
	}
	if u.GetName() != "bootstrap" || u.GetKind() != "GitRepo" {
		t.Errorf("object %s %s", u.GetKind(), u.GetName())
	}
}
