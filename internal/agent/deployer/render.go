package deployer

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
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
}

// renderSource turns a bundle manifest into what is installed: the chart
// under helm.chart when set, else the output of kustomize or the raw
// manifests with yaml.overlays applied, from which Deploy synthesizes a
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
		return source{chart: c}, err
	}
	var docs []namedDoc
	var err error
	kdir := ""
	if opts.Kustomize != nil && opts.Kustomize.Dir != "" {
		kdir = path.Clean(opts.Kustomize.Dir)
	} else if hasKustomization(files, ".") {
		kdir = "."
	}
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

type namedDoc struct {
	name    string
	content string
}

func hasKustomization(files map[string]string, dir string) bool {
	for _, n := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
		if _, ok := files[path.Join(dir, n)]; ok {
			return true
		}
	}
	return false
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
			patched, err := mergePatchYAML(out[orig], files[name])
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

func mergePatchYAML(orig, patch string) (string, error) {
	oj, err := yaml.YAMLToJSON([]byte(orig))
	if err != nil {
		return "", err
	}
	pj, err := yaml.YAMLToJSON([]byte(patch))
	if err != nil {
		return "", err
	}
	merged, err := jsonpatch.MergePatch(oj, pj)
	if err != nil {
		return "", err
	}
	y, err := yaml.JSONToYAML(merged)
	return string(y), err
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
