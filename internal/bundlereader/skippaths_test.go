package bundlereader

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// TestPathsYieldingNoBundleAreSkipped: as in Rancher Fleet, a path that
// yields no bundle (a glob match holding only a README, a path that does
// not exist, one naming a file, a glob matching nothing) is skipped with a
// warning instead of failing the GitRepo, and the other paths' bundles are
// built.
func TestPathsYieldingNoBundleAreSkipped(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"apps/web/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n",
		"apps/api/fleet.yaml": "defaultNamespace: api\n",
		"apps/api/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: api}\n",
		"apps/docs/README.md": "how to deploy\n",
		"apps/notes.txt":      "a file the glob matches too\n",
		"other.yaml":          "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n",
	})
	var warnings []string
	opts := Options{Warn: func(msg string) { warnings = append(warnings, msg) }}
	bs, err := Read(context.Background(), "repo", dir, []string{"apps/*", "gone", "other.yaml", "empty*"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bundleNames(bs), []string{"repo-apps-api", "repo-apps-web"}; !reflect.DeepEqual(got, want) {
		t.Errorf("bundles = %q, want %q", got, want)
	}
	want := []string{
		`path "apps/docs": no fleet.yaml and no YAML manifests found; skipped`,
		`path "gone" does not exist; skipped`,
		`path "other.yaml" is a file; paths name directories; skipped`,
		`path "empty*" matches nothing; skipped`,
	}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings = %q, want %q", warnings, want)
	}
}

// TestNoPathYieldingABundleFails: when no path yields a bundle the read
// fails, naming every path's reason, and returns no bundle: an empty
// result would make a GitRepo prune all its Bundles.
func TestNoPathYieldingABundleFails(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"apps/docs/README.md": "how to deploy\n",
		"apps/a.yaml":         "kind: A\n",
	})
	var warnings []string
	opts := Options{Warn: func(msg string) { warnings = append(warnings, msg) }}
	bs, err := Read(context.Background(), "repo", dir, []string{"apps/*", "gone"}, opts)
	if err == nil || bs != nil {
		t.Fatalf("bundles %q, err %v; want an error and no bundle", bundleNames(bs), err)
	}
	for _, want := range []string{
		`no bundle to deploy at paths ["apps/*" "gone"]`,
		`path "apps/docs": no fleet.yaml and no YAML manifests found`,
		`path "gone" does not exist`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to contain %q", err, want)
		}
	}
	if warnings != nil {
		t.Errorf("warnings = %q; a failed read says why in its error", warnings)
	}
}
