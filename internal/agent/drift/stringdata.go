package drift

import (
	"encoding/base64"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// stringDataAsData rewrites, for a core Secret, the comparePatches paths
// that name stringData so they name data. Diff folds the desired
// stringData into data (normalizeDesired) before any pointer or operation
// applies, and the live Secret never has stringData; a user who ignores
// /stringData/password because the chart sets it there would otherwise
// ignore nothing, and correctDrift would overwrite a rotated password.
// /stringData/<key>... becomes /data/<key>...; the whole /stringData (as a
// pointer, or the path of a remove or an ignore) becomes each /data/<key>
// the chart sets in stringData, so keys set in data stay compared. Values
// of add, replace and test are base64-encoded, as stringData values are
// when stored in data. Pointers keep their original path too, for a
// stringData value that is no string (normalizeDesired leaves it there).
func stringDataAsData(desired *unstructured.Unstructured, patches []fleet.ComparePatch) []fleet.ComparePatch {
	gvk := desired.GroupVersionKind()
	if gvk.Group != "" || gvk.Kind != "Secret" || len(patches) == 0 {
		return patches
	}
	keys := stringDataKeys(desired)
	out := make([]fleet.ComparePatch, 0, len(patches))
	for _, p := range patches {
		var ptrs []string
		for _, ptr := range p.JSONPointers {
			ptrs = append(ptrs, ptr)
			ptrs = append(ptrs, dataPaths(ptr, keys)...)
		}
		var ops []fleet.Operation
		for _, op := range p.Operations {
			ops = append(ops, dataOperations(op, keys)...)
		}
		p.JSONPointers, p.Operations = ptrs, ops
		out = append(out, p)
	}
	return out
}

// stringDataKeys are the keys of the desired Secret's stringData, escaped
// as JSON pointer tokens.
func stringDataKeys(desired *unstructured.Unstructured) []string {
	sd, _, _ := unstructured.NestedMap(desired.Object, "stringData")
	keys := make([]string, 0, len(sd))
	for k := range sd {
		keys = append(keys, strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"))
	}
	return keys
}

// dataPaths are the data paths a stringData path stands for; none for any
// other path.
func dataPaths(path string, keys []string) []string {
	if path == "/stringData" {
		out := make([]string, 0, len(keys))
		for _, k := range keys {
			out = append(out, "/data/"+k)
		}
		return out
	}
	if rest, ok := strings.CutPrefix(path, "/stringData/"); ok {
		return []string{"/data/" + rest}
	}
	return nil
}

// dataOperations are the operations op stands for once stringData is in
// data: op itself when its path does not name stringData.
func dataOperations(op fleet.Operation, keys []string) []fleet.Operation {
	if removes(op) {
		// Removing the original path too is harmless, and covers a value
		// left in stringData.
		out := []fleet.Operation{op}
		for _, p := range dataPaths(op.Path, keys) {
			out = append(out, fleet.Operation{Op: op.Op, Path: p})
		}
		return out
	}
	if !strings.HasPrefix(op.Path, "/stringData/") {
		return []fleet.Operation{op}
	}
	rest := strings.TrimPrefix(op.Path, "/stringData/")
	mapped := fleet.Operation{Op: op.Op, Path: "/data/" + rest, Value: op.Value}
	switch op.Op {
	case "add", "replace", "test":
		mapped.Value = base64.StdEncoding.EncodeToString([]byte(op.Value))
	}
	return []fleet.Operation{mapped}
}
