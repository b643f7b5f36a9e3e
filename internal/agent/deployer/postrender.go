package deployer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	goyaml "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Labels and annotations the agent puts on every deployed object. The names
// are Fleet's, so tools that look for them keep working.
const (
	// SetIDAnnotation names the BundleDeployment an object belongs to.
	SetIDAnnotation = "objectset.rio.cattle.io/id"
	// SetHashLabel lets the drift watcher select only objects Fleet deployed.
	SetHashLabel = "objectset.rio.cattle.io/hash"
	// ResourcePolicyAnnotation keeps CRDs when the release is removed.
	ResourcePolicyAnnotation = "helm.sh/resource-policy"
)

// SetID is the object-set ID of a BundleDeployment's objects.
func SetID(bdName string) string { return "default-" + bdName }

// SetHash is the label value derived from the set ID (label values are
// limited to 63 characters).
func SetHash(bdName string) string {
	d := sha256.Sum256([]byte(SetID(bdName)))
	return hex.EncodeToString(d[:])[:40]
}

// ErrNamespace is returned when `namespace` is set and the bundle contains a
// cluster-scoped object.
var ErrNamespace = errors.New("cluster-scoped object not allowed")

// postRenderer enforces namespaces, labels every object for the drift
// watcher and creates the bundle's CRDs before Helm maps the other objects,
// so that custom resources of those CRDs install in the same pass. It runs
// as Helm's post-renderer for charts, and before Helm (preRender) for the
// charts the agent synthesizes.
type postRenderer struct {
	bdName           string
	targetNamespace  string
	releaseNamespace string
	keepCRDs         bool
	mapper           meta.RESTMapper
	// applyCRDs is called with the bundle's CRDs before Helm builds the
	// object list; nil skips it.
	applyCRDs func([]*unstructured.Unstructured) error
	// kustomize, when set, is the bundle's kustomization the chart's
	// rendered objects go through before the rules above (Run only).
	kustomize *chartKustomization
	// rendered are the objects of the last render, as transformed: what
	// Deploy may adopt when Helm refuses an object that exists.
	rendered []*unstructured.Unstructured
}

var crdGK = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}

// Run is the Helm post-renderer, for bundles that are Helm charts: their
// templates are only known once Helm rendered them.
func (p *postRenderer) Run(in *bytes.Buffer) (*bytes.Buffer, error) {
	objs, err := decodeAll(in.Bytes())
	if err != nil {
		return nil, err
	}
	if p.kustomize != nil {
		if objs, err = kustomizeRendered(p.kustomize, objs); err != nil {
			return nil, err
		}
	}
	crds, err := p.transform(objs)
	if err != nil {
		return nil, err
	}
	p.rendered = objs
	var out bytes.Buffer
	if err := writeAll(&out, objs); err != nil {
		return nil, err
	}
	if err := p.createCRDs(crds); err != nil {
		return nil, err
	}
	return &out, nil
}

// createCRDs creates the bundle's CRDs (applyCRDs) before Helm maps the
// other objects.
func (p *postRenderer) createCRDs(crds []*unstructured.Unstructured) error {
	if len(crds) == 0 || p.applyCRDs == nil {
		return nil
	}
	return p.applyCRDs(crds)
}

// preRender applies the same rules to the files of a chart the agent
// synthesizes from raw manifests or kustomize output, whose content is
// final before Helm renders it (its templates only include the files).
// Doing it here rather than in a post-renderer spares Helm's post-render
// plumbing (merging every template into one annotated stream and splitting
// it again, a YAML parse and write each), about a fifth of a deployment's
// CPU. It returns the transformed files and the bundle's CRDs, which the
// caller creates before Helm maps the other objects.
func (p *postRenderer) preRender(docs []namedDoc) ([]namedDoc, []*unstructured.Unstructured, error) {
	perDoc := make([][]*unstructured.Unstructured, len(docs))
	var all []*unstructured.Unstructured
	for i, d := range docs {
		objs, err := decodeAll([]byte(d.content))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", d.name, err)
		}
		perDoc[i] = objs
		all = append(all, objs...)
	}
	crds, err := p.transform(all)
	if err != nil {
		return nil, nil, err
	}
	p.rendered = all
	out := make([]namedDoc, 0, len(docs))
	for i, d := range docs {
		var buf bytes.Buffer
		if err := writeAll(&buf, perDoc[i]); err != nil {
			return nil, nil, err
		}
		out = append(out, namedDoc{name: d.name, content: buf.String()})
	}
	return out, crds, nil
}

// transform enforces namespaces and puts the drift watcher's label and
// annotations on every object of one bundle, in place, and returns its
// CRDs. A CRD in the bundle decides the scope of its kind.
func (p *postRenderer) transform(objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	crdScopes := map[schema.GroupKind]bool{} // kind -> namespaced
	var crds []*unstructured.Unstructured
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() != crdGK {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		crdScopes[schema.GroupKind{Group: group, Kind: kind}] = scope != "Cluster"
		crds = append(crds, o)
	}
	for _, o := range objs {
		namespaced := p.isNamespaced(o.GroupVersionKind(), crdScopes)
		switch {
		case p.targetNamespace != "" && !namespaced:
			return nil, fmt.Errorf("%w: %s %s is cluster-scoped but the bundle sets namespace %q",
				ErrNamespace, o.GetKind(), o.GetName(), p.targetNamespace)
		case p.targetNamespace != "":
			o.SetNamespace(p.targetNamespace)
		case namespaced && o.GetNamespace() == "":
			o.SetNamespace(p.releaseNamespace)
		case !namespaced:
			o.SetNamespace("")
		}
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[SetHashLabel] = SetHash(p.bdName)
		o.SetLabels(labels)
		ann := o.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[SetIDAnnotation] = SetID(p.bdName)
		if o.GroupVersionKind().GroupKind() == crdGK && p.keepCRDs {
			ann[ResourcePolicyAnnotation] = "keep"
		}
		o.SetAnnotations(ann)
	}
	return crds, nil
}

// writeAll writes objs as a YAML stream, one document each.
//
// It encodes the objects' maps with go-yaml directly, not through JSON as
// sigs.k8s.io/yaml does (JSON, then parsed and written again as YAML):
// the same encoder writes every value, so the documents read back the
// same (FuzzWriteAll), at less than half the CPU and a third of the
// garbage. Keys are sorted either way.
func writeAll(out *bytes.Buffer, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		b, err := goyaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	return nil
}

func (p *postRenderer) isNamespaced(gvk schema.GroupVersionKind, crdScopes map[schema.GroupKind]bool) bool {
	if ns, ok := crdScopes[gvk.GroupKind()]; ok {
		return ns
	}
	if p.mapper != nil {
		if m, err := p.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
			return m.Scope.Name() == meta.RESTScopeNameNamespace
		}
	}
	// Unknown kinds are treated as namespaced (Helm reports kinds that do
	// not exist), except well-known cluster-scoped ones.
	return !clusterScoped[gvk.Kind]
}

var clusterScoped = map[string]bool{
	"CustomResourceDefinition": true, "Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"PersistentVolume": true, "StorageClass": true, "PriorityClass": true, "APIService": true,
	"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true, "IngressClass": true,
	"RuntimeClass": true, "CSIDriver": true, "Node": true,
}

// decodeAll parses a multi-document YAML stream, skipping empty documents.
func decodeAll(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		m := map[string]any{}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%w: parsing rendered manifests: %v", ErrRender, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return nil, err
			}
			for i := range l.Items {
				if !hasKind(&l.Items[i]) {
					return nil, fmt.Errorf("%w: list item %d without apiVersion/kind: %s", ErrRender, i, strings.TrimSpace(firstLine(data)))
				}
				out = append(out, &l.Items[i])
			}
			continue
		}
		if !hasKind(u) {
			return nil, fmt.Errorf("%w: object without apiVersion/kind: %s", ErrRender, strings.TrimSpace(firstLine(data)))
		}
		out = append(out, u)
	}
}

func hasKind(u *unstructured.Unstructured) bool {
	return u.GetKind() != "" && u.GetAPIVersion() != ""
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// ObjectsOf parses a release manifest (as the post-renderer wrote it, so
// every namespaced object has its namespace).
func ObjectsOf(releaseManifest string) ([]*unstructured.Unstructured, error) {
	return decodeAll([]byte(releaseManifest))
}
