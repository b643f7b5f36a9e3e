package bundlereader

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// hiddenRepo is a repository read from its root that carries CI
// configuration, a .env file and editor state next to one real bundle.
func hiddenRepo(t *testing.T) string {
	t.Helper()
	return writeRepo(t, map[string]string{
		".github/workflows/ci.yml":  "on: push\njobs: {}\n",
		".gitlab-ci.yml":            "stages: [test]\n",
		".env":                      "API_TOKEN=s3cr3t\n",
		"README.md":                 "docs\n",
		"app/fleet.yaml":            "defaultNamespace: app\n",
		"app/m.yaml":                "kind: ConfigMap\n",
		"app/.secret.yaml":          "kind: Secret\n",
		"app/.vscode/settings.yaml": "editor: {}\n",
		"app/sub/.keep":             "",
		"app/sub/n.yaml":            "kind: ConfigMap\n",
		"app/.fleetignore":          "ignored.yaml\n",
		"app/ignored.yaml":          "kind: Ignored\n",
		// A fleet.yaml in a hidden directory still defines a bundle, as
		// in Rancher Fleet (its walk skips only .git).
		".hidden-bundle/fleet.yaml": "",
		".hidden-bundle/h.yaml":     "kind: ConfigMap\n",
	})
}

// TestHiddenFilesAreNotBundleContent: YAML in .github/ or a root
// .gitlab-ci.yml makes no root bundle (which no cluster could deploy), and
// no file or directory whose name starts with "." (a .env with secrets)
// is shipped in any bundle; .fleetignore still applies.
func TestHiddenFilesAreNotBundleContent(t *testing.T) {
	bs, err := Read(context.Background(), "repo", hiddenRepo(t), nil, Options{Namespace: "ws"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bundleNames(bs), []string{"repo-app", "repo-hidden-bundle-74fa8d1e"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("bundles = %q, want %q (no root bundle for hidden YAML)", got, want)
	}
	for _, b := range bs {
		for _, r := range b.Spec.Resources {
			for _, part := range strings.Split(r.Name, "/") {
				if strings.HasPrefix(part, ".") {
					t.Errorf("bundle %s holds hidden file %s", b.Name, r.Name)
				}
			}
			if strings.Contains(r.Content, "s3cr3t") {
				t.Errorf("bundle %s ships the .env content in %s", b.Name, r.Name)
			}
		}
	}
	if got, want := keys(resourceNames(bs[0])), []string{"m.yaml", "sub/n.yaml"}; !reflect.DeepEqual(got, want) {
		t.Errorf("app resources = %v, want %v", got, want)
	}
	if got, want := keys(resourceNames(bs[1])), []string{"h.yaml"}; !reflect.DeepEqual(got, want) {
		t.Errorf(".hidden-bundle resources = %v, want %v", got, want)
	}
}

// TestOnlyHiddenYAMLIsNothingToDeploy: a path whose only YAML is hidden
// is reported as holding nothing to deploy, like a path without YAML.
func TestOnlyHiddenYAMLIsNothingToDeploy(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		".github/workflows/ci.yml": "on: push\n",
		".gitlab-ci.yml":           "stages: [test]\n",
		"docs/.config.yaml":        "x: 1\n",
		"README.md":                "docs\n",
	})
	_, err := Read(context.Background(), "repo", dir, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), `path ".": no fleet.yaml and no YAML manifests found`) {
		t.Fatalf("err = %v, want nothing to deploy", err)
	}
}
