package bundlereader

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
)

func bundleNames(bs []*fleet.Bundle) []string {
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		out = append(out, b.Name)
	}
	return out
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestDiscoveryAndNaming(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"root.yaml":             "kind: A\n",
		"plain/sub/x.yml":       "kind: B\n",
		"app/fleet.yaml":        "{}\n",
		"app/m.yaml":            "kind: C\n",
		"app/inner/fleet.yml":   "defaultNamespace: inner\n",
		"app/inner/m.yaml":      "kind: D\n",
		"Mixed_Case/fleet.yaml": "",
		"Mixed_Case/m.yaml":     "kind: E\n",
		"named/fleet.yaml":      "name: custom.name\n",
		"named/m.yaml":          "kind: F\n",
		"docs/README.md":        "not a bundle\n",
		"a-very-long-directory-name-that-goes-on/and-on-and-on/fleet.yaml": "",
		"a-very-long-directory-name-that-goes-on/and-on-and-on/m.yaml":     "kind: G\n",
	})
	bs, err := Read(context.Background(), "repo", dir, nil, Options{Namespace: "ws"})
	if err != nil {
		t.Fatal(err)
	}
	got := bundleNames(bs)
	want := []string{
		"custom.name", // fleet.yaml's name, as written
		"repo",
		"repo-a-very-long-directory-name-that-goes-on-an-3e4c2",
		"repo-app",
		"repo-app-inner",
		"repo-mixed-case-7e57bc11",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("bundles = %q\nwant      %q", got, want)
	}
	for _, b := range bs {
		if len(b.Name) > 53 || b.Namespace != "ws" {
			t.Errorf("bundle %s/%s: bad name or namespace", b.Namespace, b.Name)
		}
	}
	// The root bundle owns plain/ and root.yaml but not app/ (its own bundle).
	root := bs[1]
	if names, want := keys(resourceNames(root)), []string{"docs/README.md", "plain/sub/x.yml", "root.yaml"}; !reflect.DeepEqual(names, want) {
		t.Errorf("root resources = %v, want %v", names, want)
	}
	app := bs[3]
	if names := keys(resourceNames(app)); !reflect.DeepEqual(names, []string{"m.yaml"}) {
		t.Errorf("app resources = %v (fleet.yaml and inner/ must be excluded)", names)
	}

	// Paths and globs select bundles.
	bs, err = Read(context.Background(), "repo", dir, []string{"app/*"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := bundleNames(bs); !reflect.DeepEqual(got, []string{"repo-app-inner"}) {
		t.Errorf("glob app/* = %v", got)
	}
}

func TestFleetIgnore(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"fleet.yaml":         "",
		".fleetignore":       "*.md\n# comment\ntmp/\n/only-root.yaml\nsub/*.bak\n!keep.md\n",
		"a.yaml":             "kind: A\n",
		"README.md":          "x",
		"keep.md":            "x",
		"only-root.yaml":     "x",
		"tmp/x.yaml":         "x",
		"sub/only-root.yaml": "x",
		"sub/y.bak":          "x",
		"sub/z.yaml":         "x",
		"sub/.fleetignore":   "z.yaml\n",
		"deep/a/b/c.md":      "x",
		"deep/a/b/c.yaml":    "x",
	})
	b, err := readOne(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := keys(resourceNames(b))
	want := []string{"a.yaml", "deep/a/b/c.yaml", "keep.md", "sub/only-root.yaml"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("resources = %v, want %v", got, want)
	}
}

// TestFleetIgnoreInDiscovery: YAML a .fleetignore excludes does not make
// its directory a bundle; only the bundles with content remain.
func TestFleetIgnoreInDiscovery(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{name: "ignored docs directory", files: map[string]string{
			".fleetignore":   "docs/\n",
			"docs/a.yaml":    "kind: Doc\n",
			"docs/b/c.yml":   "kind: Doc\n",
			"app/fleet.yaml": "{}\n",
			"app/cm.yaml":    "kind: ConfigMap\n",
		}, want: []string{"r-app"}},
		{name: "ignored by pattern", files: map[string]string{
			".fleetignore":   "*.yaml\n",
			"notes.yaml":     "kind: Doc\n",
			"app/fleet.yaml": "{}\n",
			"app/cm.yaml":    "kind: ConfigMap\n",
		}, want: []string{"r-app"}},
		// A fleet.yaml below an ignored directory still defines a bundle of
		// its own: ignore files select the files of a bundle, not bundles.
		{name: "bundle below an ignored directory", files: map[string]string{
			".fleetignore":        "docs/\n",
			"docs/a.yaml":         "kind: Doc\n",
			"docs/app/fleet.yaml": "{}\n",
			"docs/app/cm.yaml":    "kind: ConfigMap\n",
		}, want: []string{"r-docs-app"}},
		{name: "re-included YAML keeps the root", files: map[string]string{
			".fleetignore":   "*.yaml\n!keep.yaml\n",
			"notes.yaml":     "kind: Doc\n",
			"keep.yaml":      "kind: ConfigMap\n",
			"app/fleet.yaml": "{}\n",
			"app/cm.yaml":    "kind: ConfigMap\n",
		}, want: []string{"r", "r-app"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bs, err := Read(context.Background(), "r", writeRepo(t, tc.files), nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := bundleNames(bs); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("bundles = %q, want %q", got, tc.want)
			}
			for _, b := range bs {
				if len(b.Spec.Resources) == 0 {
					t.Errorf("bundle %s has no resources", b.Name)
				}
			}
		})
	}
}

func TestTargetsAssembly(t *testing.T) {
	gitTargets := []fleet.BundleTarget{{Name: "git", ClusterGroup: "g"}}
	gitRestr := []fleet.BundleTargetRestriction{{Name: "git", ClusterGroup: "g"}}
	cases := []struct {
		name      string
		fleetYAML string
		opts      Options
		targets   []string
		restr     []string
	}{
		{name: "default", fleetYAML: "", targets: []string{"default"}},
		{name: "gitrepo targets", fleetYAML: "", opts: Options{Targets: gitTargets, TargetRestrictions: gitRestr}, targets: []string{"git"}, restr: []string{"git"}},
		{name: "customizations first", fleetYAML: "targetCustomizations:\n- clusterName: a\n- name: b\n  clusterName: b\n",
			opts: Options{Targets: gitTargets, TargetRestrictions: gitRestr}, targets: []string{"target000", "b", "git"}, restr: []string{"git"}},
		{name: "targets key", fleetYAML: "targets:\n- clusterName: c1\ntargetCustomizations:\n- clusterName: c2\n", targets: []string{"target000", "target001"}},
		{name: "overrideTargets replace gitrepo", fleetYAML: "targetCustomizations:\n- name: c\n  clusterName: c\noverrideTargets:\n- name: o\n  clusterGroup: o\n",
			opts: Options{Targets: gitTargets, TargetRestrictions: gitRestr}, targets: []string{"c", "o"}, restr: []string{"o"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRepo(t, map[string]string{"fleet.yaml": tc.fleetYAML, "cm.yaml": "kind: ConfigMap\n"})
			b, err := readOne(t, dir, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var targets, restr []string
			for _, x := range b.Spec.Targets {
				targets = append(targets, x.Name)
			}
			for _, x := range b.Spec.TargetRestrictions {
				restr = append(restr, x.Name)
			}
			if !reflect.DeepEqual(targets, tc.targets) || !reflect.DeepEqual(restr, tc.restr) {
				t.Errorf("targets %v restrictions %v, want %v %v", targets, restr, tc.targets, tc.restr)
			}
		})
	}
}

func TestCompressionAndSizeLimit(t *testing.T) {
	big := strings.Repeat("data: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", 20000) // ~1.2 MB, compresses well
	dir := writeRepo(t, map[string]string{"fleet.yaml": "", "big.yaml": big, "small.yaml": "kind: X\n"})
	b, err := readOne(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range b.Spec.Resources {
		if r.Encoding != manifest.EncodingBase64Gz {
			t.Errorf("resource %s not compressed in a bundle over the threshold", r.Name)
		}
		if r.Name == "big.yaml" {
			if content, err := manifest.Decode(r); err != nil || content != big {
				t.Errorf("big.yaml does not round-trip: %v", err)
			}
		}
	}
	// Incompressible content beyond the limit: a clear error naming the bundle.
	random := make([]byte, 400<<10)
	for i := range random {
		random[i] = byte('a' + (i*7919+i/13*31)%26)
	}
	noise := map[string]string{"fleet.yaml": ""}
	seed := uint32(1)
	for f := 0; f < 4; f++ {
		buf := make([]byte, 300<<10)
		for i := range buf {
			seed = seed*1664525 + 1013904223
			buf[i] = byte('!' + seed>>24%90)
		}
		noise["f"+string(rune('a'+f))+".txt"] = string(buf)
	}
	_, err = readOne(t, writeRepo(t, noise), Options{Limits: Limits{MaxBundleSize: 1 << 20}})
	var se *SizeError
	if !errors.As(err, &se) || se.Bundle != "test" || se.Size <= 1<<20 || !strings.Contains(err.Error(), `bundle "test" is `) {
		t.Fatalf("err = %v, want a SizeError for bundle test", err)
	}
	if !errors.Is(err, ErrLimit) {
		t.Error("a size error must match ErrLimit")
	}
}

func TestBadInput(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.yaml"), []byte("kind: Secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		files map[string]string
		setup func(t *testing.T, dir string)
		paths []string
		opts  Options
		want  string
	}{
		{name: "invalid YAML", files: map[string]string{"fleet.yaml": "helm: [unclosed"}, want: "fleet.yaml: invalid YAML"},
		{name: "not a mapping", files: map[string]string{"fleet.yaml": "- a\n- b\n"}, want: "must be a mapping of keys, not a list"},
		{name: "wrong type", files: map[string]string{"fleet.yaml": "helm:\n  maxHistory: many\n"}, want: "invalid fleet.yaml"},
		{name: "missing local chart", files: map[string]string{"fleet.yaml": "helm:\n  chart: ./nochart\n"}, want: `helm.chart "./nochart" not found`},
		{name: "dir without Chart.yaml", files: map[string]string{"fleet.yaml": "helm:\n  chart: sub\n", "sub/x.yaml": "a: b\n"}, want: "no Chart.yaml"},
		{name: "chart outside repo", files: map[string]string{"fleet.yaml": "helm:\n  chart: ../../x\n"}, want: "points outside the repository"},
		{name: "unsupported chart source", files: map[string]string{"fleet.yaml": "helm:\n  chart: s3::https://example.com/x\n"}, want: "unsupported chart source"},
		{name: "missing values file", files: map[string]string{"fleet.yaml": "helm:\n  valuesFiles: [nope.yaml]\n"}, want: "helm.valuesFiles"},
		{name: "bad values file", files: map[string]string{"fleet.yaml": "helm:\n  valuesFiles: [v.yaml]\n", "v.yaml": "- list\n"}, want: "v.yaml: invalid YAML"},
		{name: "dependsOn without name", files: map[string]string{"fleet.yaml": "dependsOn:\n- acceptedStates: [Ready]\n"}, want: "dependsOn[0]: name or selector is required"},
		{name: "dependsOn bad state", files: map[string]string{"fleet.yaml": "dependsOn:\n- name: x\n  acceptedStates: [Done]\n"}, want: `invalid accepted state "Done"`},
		{name: "bad releaseName", files: map[string]string{"fleet.yaml": "helm:\n  releaseName: Bad_Name\n"}, want: "helm.releaseName"},
		{name: "bad customization mode", files: map[string]string{"fleet.yaml": "targetCustomizationMode: Some\n"}, want: "targetCustomizationMode"},
		{name: "symlink escaping the root", files: map[string]string{"fleet.yaml": ""},
			setup: func(t *testing.T, dir string) {
				mustSymlink(t, filepath.Join(outside, "secret.yaml"), filepath.Join(dir, "leak.yaml"))
			},
			want: "leak.yaml points outside the repository"},
		{name: "symlinked dir escaping the root", files: map[string]string{"fleet.yaml": ""},
			setup: func(t *testing.T, dir string) { mustSymlink(t, outside, filepath.Join(dir, "sub")) },
			want:  "sub points outside the repository"},
		{name: "file too big", files: map[string]string{"fleet.yaml": "", "a.yaml": strings.Repeat("x", 2000)}, opts: Options{Limits: Limits{MaxFileSize: 1000}},
			want: "a.yaml: file is larger than the limit of 1000 bytes"},
		{name: "too many files", files: map[string]string{"fleet.yaml": "", "a.yaml": "", "b.yaml": "", "c.yaml": ""}, opts: Options{Limits: Limits{MaxFiles: 2}},
			want: "more than 2 files"},
		{name: "repo too big", files: map[string]string{"fleet.yaml": "", "a.yaml": strings.Repeat("x", 600), "b.yaml": strings.Repeat("x", 600)},
			opts: Options{Limits: Limits{MaxTotalSize: 1000}}, want: "exceeds the limit of 1000 bytes"},
		{name: "path outside", files: map[string]string{"a.yaml": ""}, paths: []string{"../"}, want: "is outside the repository"},
		// A leading "/" is the repository root, as in Rancher Fleet.
		{name: "absolute path", files: map[string]string{"a.yaml": ""}, paths: []string{"/etc"}, want: `path "etc" does not exist`},
		{name: "missing path", files: map[string]string{"a.yaml": ""}, paths: []string{"nope*"}, want: `path "nope*" matches nothing`},
		// A path naming nothing fails the read, even beside paths that
		// yield bundles (TestPathNamingNothingFails): skipping it would
		// make the caller prune its Bundles.
		{name: "missing literal path", files: map[string]string{"app/fleet.yaml": ""}, paths: []string{"app", "gone"}, want: `path "gone" does not exist`},
		{name: "path is a file", files: map[string]string{"deploy/app.yaml": "kind: A\n"}, paths: []string{"deploy/app.yaml"},
			want: `path "deploy/app.yaml" is a file; paths name directories`},
		{name: "glob matches only files", files: map[string]string{"apps/a.yaml": "kind: A\n", "apps/b.yaml": "kind: B\n"}, paths: []string{"apps/*"},
			want: `path "apps/*" matches no directory`},
		{name: "one of several paths is a file", files: map[string]string{"app/fleet.yaml": "", "other.yaml": "kind: A\n"}, paths: []string{"app", "other.yaml"},
			want: `path "other.yaml" is a file`},
		{name: "nothing to deploy", files: map[string]string{"docs/README.md": ""}, want: "no fleet.yaml and no YAML manifests found"},
		// YAML a .fleetignore excludes is not deployed, so it must not make
		// the path a bundle: an empty bundle would replace what is deployed.
		{name: "only ignored YAML in path", files: map[string]string{"p/x.yaml": "kind: A\n", "p/.fleetignore": "*.yaml\n"}, paths: []string{"p"},
			want: `path "p": no fleet.yaml and no YAML manifests found`},
		{name: "only ignored YAML in root", files: map[string]string{"x.yaml": "kind: A\n", "sub/y.yml": "kind: B\n", ".fleetignore": "*.yaml\nsub/\n"},
			want: `path ".": no fleet.yaml and no YAML manifests found`},
		{name: "YAML ignored by a nested .fleetignore", files: map[string]string{"README.md": "", "sub/x.yaml": "kind: A\n", "sub/.fleetignore": "x.yaml\n"},
			want: `path ".": no fleet.yaml and no YAML manifests found`},
		{name: "only a socket named like YAML", setup: func(t *testing.T, dir string) {
			l, err := net.Listen("unix", filepath.Join(dir, "s.yaml"))
			if err != nil {
				t.Skipf("no unix sockets: %v", err)
			}
			t.Cleanup(func() { _ = l.Close() })
		}, want: `path ".": no fleet.yaml and no YAML manifests found`},
		{name: "duplicate names", files: map[string]string{"a/fleet.yaml": "name: same\n", "a/cm.yaml": "kind: A\n",
			"b/fleet.yaml": "name: same\n", "b/cm.yaml": "kind: A\n"}, want: `both produce bundle "same"`},
		{name: "bad regex", files: map[string]string{"fleet.yaml": ""}, opts: Options{HelmRepoURLRegex: "("}, want: "invalid helm repo URL regex"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRepo(t, tc.files)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			bs, err := Read(context.Background(), "test", dir, tc.paths, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if bs != nil {
				t.Errorf("got %d bundles with an error; want none", len(bs))
			}
		})
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestSymlinkInsideRootFollowed(t *testing.T) {
	dir := writeRepo(t, map[string]string{"fleet.yaml": "", "shared/cm.yaml": "kind: ConfigMap\n"})
	mustSymlink(t, filepath.Join(dir, "shared", "cm.yaml"), filepath.Join(dir, "link.yaml"))
	mustSymlink(t, dir, filepath.Join(dir, "loop"))
	b, err := readOne(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(resourceNames(b)); !reflect.DeepEqual(got, []string{"link.yaml", "shared/cm.yaml"}) {
		t.Errorf("resources = %v", got)
	}
}

func TestOptionsOverride(t *testing.T) {
	dir := writeRepo(t, map[string]string{"fleet.yaml": "serviceAccount: a\nnamespace: ns1\nlabels: {x: fleet, y: fleet}\ncorrectDrift: {enabled: false}\n", "cm.yaml": "x: y\n"})
	b, err := readOne(t, dir, Options{ServiceAccount: "sa", TargetNamespace: "tns", Paused: true, KeepResources: true, DeleteNamespace: true,
		CorrectDrift: &fleet.CorrectDrift{Enabled: true}, SyncGeneration: 4, Labels: map[string]string{"y": "opt", fleet.CommitLabel: "c1"}})
	if err != nil {
		t.Fatal(err)
	}
	s := b.Spec
	if s.ServiceAccount != "sa" || s.TargetNamespace != "tns" || !s.Paused || !s.KeepResources || !s.DeleteNamespace ||
		s.CorrectDrift == nil || !s.CorrectDrift.Enabled || s.ForceSyncGeneration != 4 {
		t.Errorf("options not applied: %+v", s.BundleDeploymentOptions)
	}
	if b.Labels["x"] != "fleet" || b.Labels["y"] != "opt" || b.Annotations[fleet.CommitAnnotation] != "c1" {
		t.Errorf("labels %v annotations %v", b.Labels, b.Annotations)
	}
}

func TestUnknownKeyWarnings(t *testing.T) {
	_, warnings, err := ParseFleetYAML([]byte(`
helm:
  chart: x
  valuesFile: typo
  values:
    anything: goes
namepsace: typo
targetCustomizations:
- name: a
  clusterSelectr: {}
rolloutStrategy:
  partitions:
  - nme: p
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`unknown key "helm.valuesFile"`, `unknown key "namepsace"`, `unknown key "rolloutStrategy.partitions[0].nme"`, `unknown key "targetCustomizations[0].clusterSelectr"`}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings = %q\nwant %q", warnings, want)
	}
}

// TestImageScansAreIgnoredWithAWarning: a fleet.yaml written for a Fleet
// with image scanning still deploys, as on a Fleet whose scanning is off.
func TestImageScansAreIgnoredWithAWarning(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"fleet.yaml":  "defaultNamespace: web\nimageScans:\n- tagName: web\n  image: registry.example/web\n  interval: 5m\n  policy:\n    semver:\n      range: '>=1.0.0'\n",
		"deploy.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web # {\"$imagescan\": \"web\"}\n",
	})
	var warnings []string
	bs, err := Read(context.Background(), "repo", dir, nil, Options{Warn: func(m string) { warnings = append(warnings, m) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].Spec.DefaultNamespace != "web" || len(bs[0].Spec.Resources) != 1 {
		t.Fatalf("bundles %+v", bs)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "imageScans: image scanning is not implemented; 1 entries ignored") {
		t.Errorf("warnings %q", warnings)
	}
}

func FuzzFleetYAML(f *testing.F) {
	entries, _ := filepath.Glob("testdata/repo/*/fleet.yaml")
	for _, e := range entries {
		if data, err := os.ReadFile(e); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("helm: [unclosed"))
	f.Add([]byte("- a\n"))
	f.Add([]byte("rolloutStrategy:\n  maxUnavailable: 10%\n"))
	f.Add([]byte("dependsOn:\n- selector: {matchLabels: {a: b}}\n"))
	f.Add([]byte("labels:\n  team: a b c\n"))
	f.Add([]byte("namespaceLabels: {'bad key!': x}\nnamespaceAnnotations: {'-a': x}\n"))
	f.Add([]byte("targetCustomizations:\n- namespaceLabels: {env: a/b}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fy, _, err := ParseFleetYAML(data)
		if err == nil && fy == nil {
			t.Fatal("nil result without error")
		}
	})
}

// TestPathsGlobSkipsFiles: a glob that matches directories and files reads
// the directories and skips the files, and the fleet.yaml override of
// `fleet apply -f` goes to the first directory, not to a file before it.
func TestPathsGlobSkipsFiles(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"apps/README.yaml": "kind: Doc\n",
		"apps/web/cm.yaml": "kind: ConfigMap\n",
	})
	bs, err := Read(context.Background(), "repo", dir, []string{"apps/*"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := bundleNames(bs); !reflect.DeepEqual(got, []string{"repo-apps-web"}) {
		t.Errorf("bundles = %q, want [repo-apps-web]", got)
	}
	bs, err = Read(context.Background(), "repo", dir, []string{"apps/*"}, Options{FleetYAML: []byte("name: overridden\n")})
	if err != nil {
		t.Fatal(err)
	}
	if got := bundleNames(bs); !reflect.DeepEqual(got, []string{"overridden"}) {
		t.Errorf("bundles with a fleet.yaml override = %q, want [overridden]", got)
	}
}

// TestFleetYAMLCannotSetContentsID: contentsId would make the bundle deploy
// a stored Content named by id (possibly another tenant's) instead of the
// repository's files; valuesHash is the manager's too. Both are dropped with
// a warning.
func TestFleetYAMLCannotSetContentsID(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"fleet.yaml": "contentsId: x\nvaluesHash: h\ndefaultNamespace: app\n",
		"cm.yaml":    "kind: ConfigMap\n",
	})
	var warnings []string
	b, err := readOne(t, dir, Options{Warn: func(m string) { warnings = append(warnings, m) }})
	if err != nil {
		t.Fatal(err)
	}
	if b.Spec.ContentsID != "" || b.Spec.ValuesHash != "" {
		t.Errorf("contentsId %q valuesHash %q taken from fleet.yaml; want both empty", b.Spec.ContentsID, b.Spec.ValuesHash)
	}
	if b.Spec.DefaultNamespace != "app" || len(b.Spec.Resources) != 1 {
		t.Errorf("other fields lost: %+v", b.Spec)
	}
	want := []string{
		`fleet.yaml: key "contentsId" is internal (the bundle deploys the repository's files) and was ignored`,
		`fleet.yaml: key "valuesHash" is internal (set by the manager) and was ignored`,
	}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings = %q\nwant %q", warnings, want)
	}
}
