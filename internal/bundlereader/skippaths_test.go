package bundlereader

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// TestGlobDirWithoutBundleIsSkipped: a directory a glob matches that holds
// nothing to deploy (apps/* matching apps/docs with only a README, as in
// Rancher Fleet) is skipped with a warning naming it, files the glob also
// matches are left out, and the other paths' bundles are built.
func TestGlobDirWithoutBundleIsSkipped(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"apps/web/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n",
		"apps/api/fleet.yaml": "defaultNamespace: api\n",
		"apps/api/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: api}\n",
		"apps/docs/README.md": "how to deploy\n",
		"apps/notes.txt":      "a file the glob matches too\n",
		"infra/cm.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: infra}\n",
	})
	var warnings []string
	opts := Options{Warn: func(msg string) { warnings = append(warnings, msg) }}
	bs, err := Read(context.Background(), "repo", dir, []string{"apps/*", "infra"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bundleNames(bs), []string{"repo-apps-api", "repo-apps-web", "repo-infra"}; !reflect.DeepEqual(got, want) {
		t.Errorf("bundles = %q, want %q", got, want)
	}
	want := []string{`path "apps/*": directory "apps/docs" holds no fleet.yaml and no YAML manifests; skipped`}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings = %q, want %q", warnings, want)
	}
}

// TestPathNamingNothingFails: unlike Rancher Fleet, which skips them and
// so prunes their bundles, a literal path that does not exist (a typo, a
// directory removed from the repository) or names a file, and a glob that
// matches nothing, fail the read even when other paths yield bundles: a
// GitRepo keeps what it deployed and shows the error.
func TestPathNamingNothingFails(t *testing.T) {
	files := map[string]string{
		"apps/web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n",
		"infra/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: infra}\n",
		"other.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n",
		"empty/README.md":  "nothing to deploy\n",
	}
	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{name: "typo", paths: []string{"apps/*", "infar"}, want: `path "infar" does not exist`},
		{name: "removed below a file", paths: []string{"apps/*", "other.yaml/x"}, want: `path "other.yaml/x" does not exist`},
		{name: "file", paths: []string{"apps/*", "other.yaml"}, want: `path "other.yaml" is a file; paths name directories`},
		{name: "glob matching nothing", paths: []string{"infra", "ap*s/x*"}, want: `path "ap*s/x*" matches nothing`},
		{name: "literal dir without bundle", paths: []string{"infra", "empty"}, want: `path "empty": no fleet.yaml and no YAML manifests found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var warnings []string
			opts := Options{Warn: func(msg string) { warnings = append(warnings, msg) }}
			bs, err := Read(context.Background(), "repo", writeRepo(t, files), tc.paths, opts)
			if err == nil || bs != nil {
				t.Fatalf("bundles %q, err %v; want an error and no bundle", bundleNames(bs), err)
			}
			if err.Error() != tc.want {
				t.Errorf("err = %q, want %q", err, tc.want)
			}
			if warnings != nil {
				t.Errorf("warnings = %q; a failed read says why in its error", warnings)
			}
		})
	}
}

// TestPathLookupErrorIsReported: a literal path that cannot be looked up
// for another reason than not existing (here a symbolic link loop) is
// reported as that error, not as "does not exist". (A glob over a
// directory that cannot be read fails too, rather than reading as
// matching less as filepath.Glob does; tests run as root cannot make a
// directory unreadable.)
func TestPathLookupErrorIsReported(t *testing.T) {
	files := map[string]string{
		"team1/app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"infra/cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: infra}\n",
	}
	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{name: "literal", paths: []string{"infra", "loop"}, want: `path "loop": too many levels of symbolic links`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRepo(t, files)
			if err := os.Symlink("loop", filepath.Join(dir, "loop")); err != nil {
				t.Fatal(err)
			}
			bs, err := Read(context.Background(), "repo", dir, tc.paths, Options{})
			if err == nil || bs != nil {
				t.Fatalf("bundles %q, err %v; want an error and no bundle", bundleNames(bs), err)
			}
			if err.Error() != tc.want {
				t.Errorf("err = %q, want %q", err, tc.want)
			}
		})
	}
}

// TestGlobIgnoresLinksLeadingNowhere: a symbolic link loop or a dangling
// link a glob meets can hold no bundle, so it is passed over, as by
// filepath.Glob, instead of failing every later commit.
func TestGlobIgnoresLinksLeadingNowhere(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"team1/app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"apps/web/cm.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n",
	})
	for link, target := range map[string]string{"loop": "loop", "apps/latest": "removed"} {
		if err := os.Symlink(target, filepath.Join(dir, filepath.FromSlash(link))); err != nil {
			t.Fatal(err)
		}
	}
	bs, err := Read(context.Background(), "repo", dir, []string{"*/app", "apps/*"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bundleNames(bs), []string{"repo-apps-web", "repo-team1-app"}; !slices.Equal(got, want) {
		t.Fatalf("bundles %q, want %q", got, want)
	}
}

// TestNoPathYieldingABundleFails: when the directories globs match hold
// nothing to deploy the read fails, naming each, and returns no bundle: an
// empty result would make a GitRepo prune all its Bundles.
func TestNoPathYieldingABundleFails(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"apps/docs/README.md": "how to deploy\n",
		"apps/a.yaml":         "kind: A\n",
		"web/notes/x.txt":     "\n",
	})
	var warnings []string
	opts := Options{Warn: func(msg string) { warnings = append(warnings, msg) }}
	bs, err := Read(context.Background(), "repo", dir, []string{"apps/*", "w*/*"}, opts)
	if err == nil || bs != nil {
		t.Fatalf("bundles %q, err %v; want an error and no bundle", bundleNames(bs), err)
	}
	want := `no bundle to deploy at paths ["apps/*" "w*/*"]: ` +
		`path "apps/*": directory "apps/docs" holds no fleet.yaml and no YAML manifests; ` +
		`path "w*/*": directory "web/notes" holds no fleet.yaml and no YAML manifests`
	if err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if warnings != nil {
		t.Errorf("warnings = %q; a failed read says why in its error", warnings)
	}
}
