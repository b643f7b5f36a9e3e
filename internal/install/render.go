// Package install renders Fleet's embedded Helm charts (package charts) into
// plain Kubernetes manifests with the Helm SDK, for `fleet install ...`. The
// output is what `helm template` of the same chart gives, in install order,
// so that `fleet install controller | kubectl apply -f -` and a Helm install
// produce the same objects.
package install

import (
	"bytes"
	"fmt"
	"io/fs"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"

	"github.com/fleetgo/fleet/charts"
)

// RenderOptions say how to render one chart.
type RenderOptions struct {
	// ReleaseName defaults to the chart's name.
	ReleaseName string
	// Namespace is the release namespace.
	Namespace string
	// Values override the chart's values.yaml (deep-merged).
	Values map[string]any
}

// LoadChart loads one of the embedded charts by name (charts.CRD,
// charts.Controller, charts.Agent).
func LoadChart(name string) (*chartv2.Chart, error) {
	fsys, err := charts.FS(name)
	if err != nil {
		return nil, err
	}
	var files []*archive.BufferedFile
	err = fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		files = append(files, &archive.BufferedFile{Name: path, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading embedded chart %s: %w", name, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("embedded chart %s not found", name)
	}
	return loader.LoadFiles(files)
}

// Render renders one embedded chart and returns its manifests as one
// multi-document YAML stream in Helm's install order. A chart's `fail`
// (for example the agent chart's validation) is returned as an error.
func Render(chartName string, opts RenderOptions) (string, error) {
	chrt, err := LoadChart(chartName)
	if err != nil {
		return "", err
	}
	if opts.ReleaseName == "" {
		opts.ReleaseName = chrt.Name()
	}
	vals, err := chartutil.ToRenderValues(chrt, copyValues(opts.Values), common.ReleaseOptions{
		Name:      opts.ReleaseName,
		Namespace: opts.Namespace,
		Revision:  1,
		IsInstall: true,
	}, nil)
	if err != nil {
		return "", fmt.Errorf("chart %s: %w", chartName, err)
	}
	rendered, err := engine.Render(chrt, vals)
	if err != nil {
		return "", fmt.Errorf("rendering chart %s: %w", chartName, err)
	}
	files := map[string]string{}
	for name, content := range rendered {
		if strings.HasSuffix(name, "NOTES.txt") || strings.TrimSpace(content) == "" {
			continue
		}
		files[name] = content
	}
	_, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return "", fmt.Errorf("chart %s: %w", chartName, err)
	}
	var out bytes.Buffer
	for _, m := range manifests {
		if !hasObject(m.Content) {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", m.Name, strings.TrimSpace(m.Content))
	}
	return out.String(), nil
}

// hasObject is false for documents that are only comments.
func hasObject(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		l := strings.TrimSpace(line)
		if l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return true
		}
	}
	return false
}

// copyValues deep-copies v so that rendering never changes the caller's map.
func copyValues(v map[string]any) map[string]any {
	out := make(map[string]any, len(v))
	for k, val := range v {
		if m, ok := val.(map[string]any); ok {
			out[k] = copyValues(m)
			continue
		}
		out[k] = val
	}
	return out
}
