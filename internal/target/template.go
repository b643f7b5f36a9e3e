package target

import (
	"bytes"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// clusterLabelsPrefix in a string value is replaced by the label named by
// the rest of the string, as Fleet's global.fleet.clusterLabels do.
const (
	clusterLabelsPrefix = "global.fleet.clusterLabels."
	maxLabelDepth       = 50
)

// removedFuncs are the sprig functions templates cannot call.
var removedFuncs = []string{"env", "expandenv", "include", "tpl", "getHostByName"}

// funcMap is sprig without the functions that read the manager's
// environment or the network, or recurse into templates.
var funcMap = func() template.FuncMap {
	f := sprig.TxtFuncMap()
	for _, name := range removedFuncs {
		delete(f, name)
	}
	return f
}()

// TemplateContext is what `${ }` templates in Helm values can see.
func TemplateContext(c *fleet.Cluster) map[string]interface{} {
	return templateContext(c, cleanLabels(c.Labels))
}

// templateContext is TemplateContext with the cluster's cleaned labels
// already computed.
func templateContext(c *fleet.Cluster, lbls map[string]string) map[string]interface{} {
	values := map[string]interface{}{}
	if c.Spec.TemplateValues != nil && c.Spec.TemplateValues.Data != nil {
		values = c.Spec.TemplateValues.DeepCopy().Data
	}
	return map[string]interface{}{
		"ClusterName":        c.Name,
		"ClusterNamespace":   c.Namespace,
		"ClusterLabels":      toDict(lbls),
		"ClusterAnnotations": toDict(cleanAnnotations(c.Annotations)),
		"ClusterValues":      values,
	}
}

// cleanAnnotations drops the keys Fleet (wrangler's
// CleanAnnotationsForExport) drops: kubectl's bookkeeping, such as a
// cluster's whole last-applied-configuration, and Rancher-internal keys,
// which contain "cattle.io/". A key like "provider.cattle.io", without the
// slash, is kept, as in Fleet.
func cleanAnnotations(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		if strings.HasPrefix(k, "kubectl.kubernetes.io/") || strings.Contains(k, "cattle.io/") {
			continue
		}
		out[k] = v
	}
	return out
}

// cleanLabels is cleanAnnotations, but keeps fleet.cattle.io/ and
// management.cattle.io/ labels, which users select and template on.
func cleanLabels(in map[string]string) map[string]string {
	out := cleanAnnotations(in)
	for k, v := range in {
		if strings.HasPrefix(k, "fleet.cattle.io/") || strings.HasPrefix(k, "management.cattle.io/") {
			out[k] = v
		}
	}
	return out
}

// toDict converts to the map type sprig's dict functions (get, hasKey,
// default) expect.
func toDict(in map[string]string) map[string]interface{} {
	out := make(map[string]interface{}, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// RenderValues renders opts.helm.values (and templateValues) for one
// cluster and returns options whose values are final and whose
// templateValues are folded in. A template error is a *RenderError, which
// names the failing value but quotes no value, so that it can be shown in
// status for this cluster only.
func RenderValues(opts fleet.BundleDeploymentOptions, c *fleet.Cluster) (fleet.BundleDeploymentOptions, error) {
	return (&renderer{}).render(opts, c)
}

// renderer caches parsed templates: one bundle's values text is usually
// the same for every cluster, so it is parsed once, not once per cluster.
// located keeps which value a failure was located at, so that a bundle
// failing on every cluster is searched once per pass (see locate).
type renderer struct {
	parsed  map[string]*template.Template
	located locator
}

func (r *renderer) render(opts fleet.BundleDeploymentOptions, c *fleet.Cluster) (fleet.BundleDeploymentOptions, error) {
	if opts.Helm == nil {
		return opts, nil
	}
	out := *opts.DeepCopy()
	h := out.Helm
	if h.Values == nil && len(h.TemplateValues) == 0 {
		return out, nil
	}
	values := map[string]interface{}{}
	if h.Values != nil && h.Values.Data != nil {
		values = h.Values.Data
	}
	// Label references see the cleaned labels, the same as .ClusterLabels.
	lbls := cleanLabels(c.Labels)
	orig := values
	values = replaceLabelRefs(orig, lbls, 0).(map[string]interface{})
	if !h.DisablePreProcess {
		ctx := templateContext(c, lbls)
		data, err := yaml.Marshal(values)
		if err != nil {
			return opts, &RenderError{Path: "helm.values", Kind: "cannot be written as YAML for templating"}
		}
		rendered, err := r.execute("values", string(data), ctx)
		var parsed map[string]interface{}
		if err == nil {
			if uerr := yaml.Unmarshal([]byte(rendered), &parsed); uerr != nil {
				err = &notYAMLError{err: uerr}
			}
		}
		if err != nil {
			// Go's error quotes the values; locate names the value instead.
			return opts, r.locate(orig, values, ctx, err)
		}
		values = parsed
		if values == nil {
			values = map[string]interface{}{}
		}
		// templateValues are rendered once, after values, and replace
		// top-level keys, as in Fleet. Their output is data: rendering it
		// again with values would run a cluster's "echo ${HOME}" as a
		// template.
		for _, k := range sortedKeys(h.TemplateValues) {
			path := "helm.templateValues" + pathSegment(k)
			out, err := r.execute(path, h.TemplateValues[k], ctx)
			if err != nil {
				return opts, &RenderError{Path: path, Kind: errorKind(err)}
			}
			var v interface{}
			if err := yaml.Unmarshal([]byte(out), &v); err != nil {
				return opts, &RenderError{Path: path, Kind: errorKind(&notYAMLError{err: err})}
			}
			values[k] = v
		}
		h.TemplateValues = nil
	}
	h.Values = &fleet.GenericMap{Data: values}
	return out, nil
}

func (r *renderer) execute(name, text string, ctx map[string]interface{}) (string, error) {
	key := name + "\x00" + text
	t := r.parsed[key]
	if t == nil {
		var err error
		t, err = newTemplate(name).Parse(text)
		if err != nil {
			return "", err
		}
		if r.parsed == nil {
			r.parsed = map[string]*template.Template{}
		}
		r.parsed[key] = t
	}
	var b bytes.Buffer
	if err := t.Execute(&b, ctx); err != nil {
		return "", err
	}
	return b.String(), nil
}

// replaceLabelRefs returns a copy of v in which every string
// "global.fleet.clusterLabels.X" is the value of label X (empty if absent).
func replaceLabelRefs(v interface{}, lbls map[string]string, depth int) interface{} {
	if depth > maxLabelDepth {
		return v
	}
	switch t := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, x := range t {
			out[k] = replaceLabelRefs(x, lbls, depth+1)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, x := range t {
			out[i] = replaceLabelRefs(x, lbls, depth+1)
		}
		return out
	case string:
		if name, ok := strings.CutPrefix(t, clusterLabelsPrefix); ok {
			return lbls[name]
		}
		return t
	default:
		return v
	}
}
