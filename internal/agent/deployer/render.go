package deployer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
)

// ErrRender marks bad bundle content (bad YAML, bad kustomization, missing
// chart): retrying will not help until the bundle changes.
var ErrRender = errors.New("render")

// chartDataDir is where the files of a synthesized chart live; templates
// only include them, so "{{" inside a raw manifest is never templated.
const chartDataDir = "manifests/"

// source is what a bundle deploys before it becomes a chart: the chart of a
// Helm bundle, or the final manifests (docs) of any other bundle.
type source struct {
	chart *chart.Chart
	docs  []namedDoc
	// kustomize, for a chart whose bundle has a kustomization at
	// kustomize.dir, is that kustomization: Helm's output goes through it
	// (see kustomizeRendered).
	kustomize *chartKustomization
}

// chartKustomization is the kustomization a chart's rendered objects go
// through: the bundle's files and the directory of the kustomization.
type chartKustomization struct {
	files map[string]string
	dir   string
}

// renderSource turns a bundle manifest into what is installed: the chart
// under helm.chart when set (with the kustomization at kustomize.dir, or at
// the root, to run over its output), else the output of kustomize or the
// raw manifests with yaml.overlays applied, from which Deploy synthesizes a
// chart (chartOf). Every error is ErrRender.
func renderSource(m *manifest.Manifest, opts fleet.BundleDeploymentOptions) (source, error) {
	files := map[string]string{}
	for _, r := range m.Resources {
		content, err := manifest.Decode(r)
		if err != nil {
			return source{}, fmt.Errorf("%w: %v", ErrRender, err)
		}
		files[path.Clean(r.Name)] = content
	}
	if opts.Helm != nil && opts.Helm.Chart != "" {
		c, err := chartFromFiles(files, opts.Helm.Chart)
		if err != nil {
			return source{}, err
		}
		src := source{chart: c}
		// As in Rancher Fleet, a kustomization at kustomize.dir (default
		// the bundle root) post-processes the chart's output, so one
		// chart can take per-cluster kustomize overlays. A chart without
		// one deploys as Helm rendered it.
		dir, err := kustomizeDir(files, opts)
		if err != nil {
			return source{}, err
		}
		if dir != "" {
			src.kustomize = &chartKustomization{files: files, dir: dir}
		}
		return src, nil
	}
	kdir, err := kustomizeDir(files, opts)
	if err != nil {
		return source{}, err
	}
	var docs []namedDoc
	if kdir != "" {
		docs, err = kustomizeBuild(files, kdir)
	} else {
		var overlays []string
		if opts.YAML != nil {
			overlays = opts.YAML.Overlays
		}
		docs, err = rawManifests(files, overlays)
	}
	if err != nil {
		return source{}, fmt.Errorf("%w: %v", ErrRender, err)
	}
	return source{docs: docs}, nil
}

// kustomizeDir is the directory whose kustomization a bundle is built
// with, "" for none. As in Rancher Fleet it is kustomize.dir (default the
// bundle root) when a kustomization is there. A kustomize.dir without one
// means no kustomize at all, not the root's: Rancher deploys such a bundle
// as plain YAML (or a chart's output as rendered), and the bundle reader
// warns about it, so a fleet.yaml written for Rancher deploys the same
// here. The path is resolved among the bundle's files as Rancher's is
// ("/x" is "x"); one outside them ("../x") names no kustomization, and
// fails the bundle (ErrRender) when the bundle holds any kustomization, as
// Rancher's agent fails to lay out its files to build one.
func kustomizeDir(files map[string]string, opts fleet.BundleDeploymentOptions) (string, error) {
	dir := "."
	if opts.Kustomize != nil && opts.Kustomize.Dir != "" {
		dir = bundleDir(opts.Kustomize.Dir)
	}
	if dir == ".." || strings.HasPrefix(dir, "../") {
		if anyKustomization(files) {
			return "", fmt.Errorf("%w: kustomize.dir %q is outside the bundle, whose files alone reach the agent", ErrRender, opts.Kustomize.Dir)
		}
		return "", nil
	}
	if !hasKustomization(files, dir) {
		return "", nil
	}
	return dir, nil
}

// bundleDir is a directory of fleet.yaml as Rancher Fleet's agent resolves
// it among the bundle's files: cleaned, a leading "/" dropped ("/" is the
// bundle root). It may still start with "../", which no file has.
func bundleDir(d string) string {
	d = strings.TrimPrefix(path.Clean(d), "/")
	if d == "" {
		return "."
	}
	return d
}

// anyKustomization tells whether any file of the bundle is a kustomization
// by the suffix of its name, the check Rancher's agent makes before it
// runs kustomize at all.
func anyKustomization(files map[string]string) bool {
	for name := range files {
		for _, n := range manifest.KustomizationNames {
			if strings.HasSuffix(name, n) {
				return true
			}
		}
	}
	return false
}

type namedDoc struct {
	name    string
	content string
}

func hasKustomization(files map[string]string, dir string) bool {
	_, ok := kustomizationFile(files, dir)
	return ok
}

// kustomizationFile is the path of the kustomization file in dir, under
// any of the names kustomize reads.
func kustomizationFile(files map[string]string, dir string) (string, bool) {
	for _, n := range manifest.KustomizationNames {
		if _, ok := files[path.Join(dir, n)]; ok {
			return path.Join(dir, n), true
		}
	}
	return "", false
}

// chartFromFiles loads the chart stored under dir in the bundle resources.
func chartFromFiles(files map[string]string, dir string) (*chart.Chart, error) {
	dir = strings.TrimSuffix(path.Clean(strings.TrimPrefix(dir, "./")), "/")
	var bf []*archive.BufferedFile
	for name, content := range files {
		rel, ok := strings.CutPrefix(name, dir+"/")
		if dir == "." {
			rel, ok = name, true
		}
		if !ok {
			continue
		}
		bf = append(bf, &archive.BufferedFile{Name: rel, Data: []byte(content)})
	}
	if len(bf) == 0 {
		return nil, fmt.Errorf("%w: chart %q not found in the bundle resources", ErrRender, dir)
	}
	sort.Slice(bf, func(i, j int) bool { return bf[i].Name < bf[j].Name })
	c, err := loader.LoadFiles(bf)
	if err != nil {
		return nil, fmt.Errorf("%w: loading chart %q: %v", ErrRender, dir, err)
	}
	return c, nil
}

// kustomizeBuild runs kustomize in memory; no binary, no network, no exec
// plugins.
func kustomizeBuild(files map[string]string, dir string) ([]namedDoc, error) {
	fs := filesys.MakeFsInMemory()
	for name, content := range files {
		if err := fs.WriteFile("/"+name, []byte(content)); err != nil {
			return nil, err
		}
	}
	return runKustomize(fs, dir)
}

// runKustomize builds the kustomization in dir of fs.
func runKustomize(fs filesys.FileSystem, dir string) ([]namedDoc, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(fs, path.Join("/", dir))
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		return nil, err
	}
	return []namedDoc{{name: "kustomize.yaml", content: string(out)}}, nil
}

func isManifest(name string) bool {
	switch path.Ext(name) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// rawManifests collects every manifest outside overlays/ and .chart/ and
// applies the overlays in order: overlays/<o>/<path> replaces a file (or adds
// one), overlays/<o>/<path minus ext>_patch.<ext> merge-patches it.
func rawManifests(files map[string]string, overlays []string) ([]namedDoc, error) {
	out := map[string]string{}
	for name, content := range files {
		if strings.HasPrefix(name, "overlays/") || strings.HasPrefix(name, ".chart/") || !isManifest(name) {
			continue
		}
		out[name] = content
	}
	for _, o := range overlays {
		prefix := "overlays/" + path.Clean(o) + "/"
		var names []string
		for name := range files {
			if strings.HasPrefix(name, prefix) && isManifest(name) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			target := strings.TrimPrefix(name, prefix)
			ext := path.Ext(target)
			base, isPatch := strings.CutSuffix(strings.TrimSuffix(target, ext), "_patch")
			if !isPatch {
				out[target] = files[name]
				continue
			}
			orig, ok := findPatchTarget(out, base)
			if !ok {
				return nil, fmt.Errorf("overlay %s patches %s, which does not exist", name, base)
			}
			patched, err := patchYAML(out[orig], files[name])
			if err != nil {
				return nil, fmt.Errorf("overlay %s: %w", name, err)
			}
			out[orig] = patched
		}
	}
	docs := make([]namedDoc, 0, len(out))
	for name, content := range out {
		docs = append(docs, namedDoc{name: name, content: content})
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].name < docs[j].name })
	return docs, nil
}

func findPatchTarget(files map[string]string, base string) (string, bool) {
	for _, ext := range []string{".yaml", ".yml", ".json"} {
		if _, ok := files[base+ext]; ok {
			return base + ext, true
		}
	}
	return "", false
}

// patchYAML applies an overlay's _patch file to the file it patches, the
// way Rancher Fleet does (wrangler's patch.Apply): a patch that is a list
// is a JSON patch (RFC 6902); a patch of a kind client-go knows (a built-in
// kind) is a strategic merge patch, so that a list such as containers is
// merged by name rather than replaced (one container's image changed,
// sidecars, ports and env kept); anything else (custom resources, CRDs)
// gets a JSON merge patch.
func patchYAML(orig, patch string) (string, error) {
	oj, err := yaml.YAMLToJSON([]byte(orig))
	if err != nil {
		return "", err
	}
	pj, err := yaml.YAMLToJSON([]byte(patch))
	if err != nil {
		return "", err
	}
	var out []byte
	if trimmed := bytes.TrimSpace(pj); len(trimmed) > 0 && trimmed[0] == '[' {
		p, err := jsonpatch.DecodePatch(pj)
		if err != nil {
			return "", fmt.Errorf("JSON patch: %w", err)
		}
		if out, err = p.Apply(oj); err != nil {
			return "", fmt.Errorf("JSON patch: %w", err)
		}
	} else if typed, ok := builtinObject(oj); ok {
		if out, err = strategicpatch.StrategicMergePatch(oj, pj, typed); err != nil {
			return "", fmt.Errorf("strategic merge patch: %w", err)
		}
	} else if out, err = jsonpatch.MergePatch(oj, pj); err != nil {
		return "", fmt.Errorf("merge patch: %w", err)
	}
	y, err := yaml.JSONToYAML(out)
	return string(y), err
}

// builtinObject is an empty object of the kind of the JSON document doc
// when client-go's scheme knows that kind, which tells a strategic merge
// patch how to merge its lists. CRDs are patched as custom objects, as in
// Rancher Fleet (other code may register them in the scheme).
func builtinObject(doc []byte) (runtime.Object, bool) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(doc, &tm); err != nil || tm.Kind == "" {
		return nil, false
	}
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	if gvk.GroupKind() == crdGK {
		return nil, false
	}
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, false
	}
	return obj, true
}

// manifestsFile is the file, in the directory of a chart bundle's
// kustomization, that holds the chart's rendered objects and that the
// kustomization gets as its first resource (Rancher Fleet's name).
const manifestsFile = "fleet-manifests.yaml"

// kustomizeRendered runs a chart's rendered objects through the bundle's
// kustomization, as Rancher Fleet's post-renderer does: the objects are
// written to manifestsFile in the kustomization's directory, which is
// added to its resources unless listed already, and kustomize builds that
// directory. Hooks are left out of kustomize and returned unchanged, as
// Rancher Fleet's Helm 3 never passed hooks to a post-renderer (Helm 4
// does): an overlay is written for the chart's objects, and kustomize
// would refuse a hook that declares the same object as a template.
func kustomizeRendered(k *chartKustomization, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	var hooks, rest []*unstructured.Unstructured
	for _, o := range objs {
		if _, ok := o.GetAnnotations()[release.HookAnnotation]; ok {
			hooks = append(hooks, o)
		} else {
			rest = append(rest, o)
		}
	}
	fs := filesys.MakeFsInMemory()
	for name, content := range k.files {
		if err := fs.WriteFile("/"+name, []byte(content)); err != nil {
			return nil, err
		}
	}
	if len(rest) > 0 {
		var buf bytes.Buffer
		if err := writeAll(&buf, rest); err != nil {
			return nil, err
		}
		if err := fs.WriteFile(path.Join("/", k.dir, manifestsFile), buf.Bytes()); err != nil {
			return nil, err
		}
		kfile, _ := kustomizationFile(k.files, k.dir)
		data, err := withManifestsResource([]byte(k.files[kfile]))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrRender, kfile, err)
		}
		if err := fs.WriteFile("/"+kfile, data); err != nil {
			return nil, err
		}
	}
	docs, err := runKustomize(fs, k.dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRender, err)
	}
	out, err := decodeAll([]byte(docs[0].content))
	if err != nil {
		return nil, err
	}
	return append(out, hooks...), nil
}

// withManifestsResource is a kustomization with manifestsFile first among
// its resources.
func withManifestsResource(kustomization []byte) ([]byte, error) {
	k := map[string]any{}
	if err := yaml.Unmarshal(kustomization, &k); err != nil {
		return nil, err
	}
	var resources []any
	switch r := k["resources"].(type) {
	case nil:
	case []any:
		resources = r
	default:
		return nil, fmt.Errorf("resources is not a list")
	}
	for _, r := range resources {
		if r == manifestsFile {
			return kustomization, nil
		}
	}
	k["resources"] = append([]any{manifestsFile}, resources...)
	return yaml.Marshal(k)
}

// synthesizeChart wraps manifests into a chart whose templates only include
// the files verbatim.
func synthesizeChart(name string, docs []namedDoc) (*chart.Chart, error) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "apiVersion: v2\nname: %s\nversion: 0.0.0\n", chartName(name))
	bf := []*archive.BufferedFile{{Name: "Chart.yaml", Data: buf.Bytes()}}
	for i, d := range docs {
		data := chartDataDir + d.name
		content := d.content
		if path.Ext(d.name) == ".json" {
			y, err := yaml.JSONToYAML([]byte(content))
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrRender, d.name, err)
			}
			content = string(y)
		}
		bf = append(bf,
			&archive.BufferedFile{Name: data, Data: []byte(content)},
			&archive.BufferedFile{
				Name: fmt.Sprintf("templates/%04d.yaml", i),
				Data: fmt.Appendf(nil, "{{ .Files.Get %q }}\n", data),
			})
	}
	c, err := loader.LoadFiles(bf)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRender, err)
	}
	return c, nil
}

func chartName(s string) string {
	s = strings.ToLower(s)
	if s == "" {
		return "bundle"
	}
	return s
}
