package deployer

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// twoContainers is a Deployment with a sidecar, ports and env: what a
// strategic-merge overlay of one container must leave alone.
const twoContainers = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1
        ports: [{containerPort: 80}]
        env: [{name: MODE, value: prod}]
      - name: sidecar
        image: proxy:1
`

// TestOverlayPatchStyles: an overlay's _patch file is applied as Rancher
// Fleet applies it (wrangler's patch.Apply): a list is a JSON patch, a
// patch of a built-in kind a strategic merge patch (lists such as
// containers merge by name), a patch of any other kind a JSON merge patch.
func TestOverlayPatchStyles(t *testing.T) {
	widget := "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec:\n  size: 1\n  colors: [red, blue]\n  shape: round\n"
	cases := []struct {
		name  string
		base  map[string]string
		patch map[string]string
		check func(t *testing.T, obj *unstructured.Unstructured)
	}{{
		name:  "strategic merge patch of a built-in kind keeps the other containers and fields",
		base:  map[string]string{"deploy.yaml": twoContainers},
		patch: map[string]string{"overlays/o/deploy_patch.yaml": "spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: nginx:2\n"},
		check: func(t *testing.T, obj *unstructured.Unstructured) {
			cs, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
			if len(cs) != 2 {
				t.Fatalf("containers %v, want web and sidecar", cs)
			}
			byName := map[string]map[string]any{}
			for _, c := range cs {
				m := c.(map[string]any)
				byName[m["name"].(string)] = m
			}
			web, sidecar := byName["web"], byName["sidecar"]
			if web == nil || sidecar == nil || web["image"] != "nginx:2" || sidecar["image"] != "proxy:1" {
				t.Fatalf("containers %v", cs)
			}
			if ports, _ := web["ports"].([]any); len(ports) != 1 {
				t.Errorf("web lost its ports: %v", web)
			}
			if env, _ := web["env"].([]any); len(env) != 1 {
				t.Errorf("web lost its env: %v", web)
			}
		},
	}, {
		name: "JSON patch (a YAML list of operations)",
		base: map[string]string{"deploy.yaml": twoContainers},
		patch: map[string]string{"overlays/o/deploy_patch.yaml": "- op: replace\n  path: /spec/replicas\n  value: 3\n" +
			"- op: remove\n  path: /spec/template/spec/containers/1\n"},
		check: func(t *testing.T, obj *unstructured.Unstructured) {
			if r, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas"); fmt.Sprint(r) != "3" {
				t.Errorf("replicas %v, want 3", r)
			}
			cs, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
			if len(cs) != 1 || cs[0].(map[string]any)["image"] != "nginx:1" {
				t.Errorf("containers %v, want web only", cs)
			}
		},
	}, {
		name:  "JSON patch in a .json file",
		base:  map[string]string{"deploy.yaml": twoContainers},
		patch: map[string]string{"overlays/o/deploy_patch.json": `[{"op": "add", "path": "/metadata/labels", "value": {"tier": "front"}}]`},
		check: func(t *testing.T, obj *unstructured.Unstructured) {
			if obj.GetLabels()["tier"] != "front" || obj.GetName() != "web" {
				t.Errorf("object %v", obj.Object)
			}
		},
	}, {
		name:  "merge patch of a custom kind replaces lists and keeps other fields",
		base:  map[string]string{"widget.yaml": widget},
		patch: map[string]string{"overlays/o/widget_patch.yaml": "spec:\n  size: 2\n  colors: [green]\n  shape: null\n"},
		check: func(t *testing.T, obj *unstructured.Unstructured) {
			size, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "size")
			colors, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "colors")
			_, hasShape, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "shape")
			if fmt.Sprint(size) != "2" || len(colors) != 1 || colors[0] != "green" || hasShape || obj.GetName() != "w" {
				t.Errorf("widget %v", obj.Object)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range tc.base {
				files[k] = v
			}
			for k, v := range tc.patch {
				files[k] = v
			}
			src, err := renderSource(mf(t, files), fleet.BundleDeploymentOptions{YAML: &fleet.YAMLOptions{Overlays: []string{"o"}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(src.docs) != 1 {
				t.Fatalf("docs %v, want the patched file only", src.docs)
			}
			objs, err := ObjectsOf(src.docs[0].content)
			if err != nil {
				t.Fatalf("patched file does not parse as objects: %v\n%s", err, src.docs[0].content)
			}
			if len(objs) != 1 {
				t.Fatalf("objects %v", objs)
			}
			tc.check(t, objs[0])
		})
	}
}
