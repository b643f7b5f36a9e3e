package bundlereader

import (
	"context"
	"reflect"
	"testing"
)

// TestBundleWithoutResources: a bundle directory whose bundle has no
// resource (a fleet.yaml alone, or with only its values files) is skipped
// with a warning, as Rancher Fleet skips it (ErrNoResources), whether a
// glob matched it or it lies below a path that yields other bundles. A
// literal path that yields only such bundles fails the read like a literal
// path holding nothing, so that a GitRepo keeps what it deployed; so does
// a read in which nothing else yields a bundle.
func TestBundleWithoutResources(t *testing.T) {
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
	files := map[string]string{
		"apps/web/cm.yaml":         cm,
		"apps/empty/fleet.yaml":    "defaultNamespace: empty\n",
		"apps/values/fleet.yaml":   "helm:\n  valuesFiles: [values.yaml]\n",
		"apps/values/values.yaml":  "replicas: 2\n",
		"only/fleet.yaml":          "defaultNamespace: only\n",
		"nested/fleet.yaml":        "defaultNamespace: nested\n",
		"nested/sub/fleet.yaml":    "defaultNamespace: sub\n",
		"nested/sub/cm.yaml":       cm,
		"bare/a/fleet.yaml":        "{}\n",
		"bare/b/fleet.yaml":        "{}\n",
		"infra/cm.yaml":            cm,
		"ignored/fleet.yaml":       "{}\n",
		"ignored/.fleetignore":     "*.yaml\n",
		"ignored/sub/fleet.yaml":   "{}\n",
		"ignored/sub/.fleetignore": "*\n",
	}
	const skipped = "; skipped"
	const alone = " (a fleet.yaml alone deploys nothing: add manifests, a Helm chart or a kustomization)"
	for _, tc := range []struct {
		name     string
		paths    []string
		bundles  []string
		warnings []string
		err      string
	}{{
		name:    "glob",
		paths:   []string{"apps/*"},
		bundles: []string{"repo-apps-web"},
		warnings: []string{
			"bundle apps/empty: no resources to deploy" + skipped,
			"bundle apps/values: no resources to deploy" + skipped,
		},
	}, {
		name:     "below a literal path yielding another bundle",
		paths:    []string{"nested"},
		bundles:  []string{"repo-nested-sub"},
		warnings: []string{"bundle nested: no resources to deploy" + skipped},
	}, {
		name:  "literal path with a fleet.yaml alone",
		paths: []string{"infra", "only"},
		err:   `path "only": no resources to deploy in only` + alone,
	}, {
		name:  "literal path whose bundles all lack resources",
		paths: []string{"infra", "bare"},
		err:   `path "bare": no resources to deploy in bare/a, bare/b` + alone,
	}, {
		name:  "literal path whose YAML is ignored",
		paths: []string{"ignored"},
		err:   `path "ignored": no resources to deploy in ignored, ignored/sub` + alone,
	}, {
		name:  "glob matching only such bundles",
		paths: []string{"bare/*"},
		err:   `no bundle to deploy at paths ["bare/*"]: bundle bare/a: no resources to deploy; bundle bare/b: no resources to deploy`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var warnings []string
			opts := Options{Warn: func(msg string) { warnings = append(warnings, msg) }}
			bs, err := Read(context.Background(), "repo", writeRepo(t, files), tc.paths, opts)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err || bs != nil {
					t.Fatalf("bundles %q, err %v; want no bundle and %q", bundleNames(bs), err, tc.err)
				}
				if warnings != nil {
					t.Errorf("warnings = %q; a failed read says why in its error", warnings)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := bundleNames(bs); !reflect.DeepEqual(got, tc.bundles) {
				t.Errorf("bundles = %q, want %q", got, tc.bundles)
			}
			if !reflect.DeepEqual(warnings, tc.warnings) {
				t.Errorf("warnings = %q, want %q", warnings, tc.warnings)
			}
		})
	}
}
