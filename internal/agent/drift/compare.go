// Package drift finds differences between what a release deployed and what
// runs downstream, and says whether the deployed objects are ready.
//
// Only fields the chart sets are compared: server-side defaults (a
// container's terminationMessagePath, a Service's clusterIP...) and fields
// other controllers add are never drift. What the user declares in
// diff.comparePatches (jsonPointers and JSON patch operations) is applied
// to both sides first.
package drift

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Diff compares a desired object with its live version. It returns whether
// they differ and, if so, the JSON merge patch that would turn the live
// fields the chart sets back into the desired ones. The patch is only
// shown (status), never applied: a Secret's values and the literal env
// values of a pod template are masked in it (redactSecretPatch,
// maskEnvValues).
func Diff(desired, live *unstructured.Unstructured, patches []fleet.ComparePatch) (modified bool, patch string, err error) {
	d, err := normalized(desired)
	if err != nil {
		return false, "", err
	}
	l, err := normalized(live)
	if err != nil {
		return false, "", err
	}
	d = desiredFields(d)
	// The desired side is first put in the form the API server stores, as
	// the live side is: a pointer or operation naming /data/k must find a
	// Secret's stringData key there on both sides, or it applies to one
	// side only and the object stays Modified (a correctDrift loop).
	normalizeDesired(desired.GroupVersionKind(), d)
	// So a path naming stringData names what it became (stringDataAsData).
	patches = stringDataAsData(desired, patches)
	for _, p := range pointerPaths(desired, patches) {
		removePointer(d, p)
		removePointer(l, p)
	}
	d = applyOperations(d, desired, patches)
	l = applyOperations(l, desired, patches)
	dropServerOmitted(desired, d, l)
	if subset(d, l, nil) {
		return false, "", nil
	}
	proj := project(d, l, nil)
	pj, err := json.Marshal(proj)
	if err != nil {
		return false, "", err
	}
	dj, err := json.Marshal(d)
	if err != nil {
		return false, "", err
	}
	mp, err := jsonpatch.CreateMergePatch(pj, dj)
	if err != nil {
		return true, "", err
	}
	if desired.GetKind() == "Secret" {
		// Never a Secret's values in status: the key names, a placeholder.
		if mp, err = redactSecretPatch(mp); err != nil {
			return true, "", err
		}
	} else if mp, err = maskEnvValues(desired.GetKind(), mp); err != nil {
		// Nor the literal env values of a pod template (see maskEnvValues).
		return true, "", err
	}
	return true, string(mp), nil
}

// normalized round-trips through JSON so numbers have one type.
func normalized(u *unstructured.Unstructured) (map[string]any, error) {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, json.Unmarshal(b, &out)
}

// desiredFields drops what is never the chart's to decide: status and
// server-managed metadata.
func desiredFields(d map[string]any) map[string]any {
	delete(d, "status")
	if md, ok := d["metadata"].(map[string]any); ok {
		keep := map[string]any{}
		for _, k := range []string{"name", "namespace", "labels", "annotations"} {
			if v, ok := md[k]; ok {
				keep[k] = v
			}
		}
		d["metadata"] = keep
	}
	return d
}

// pointerPaths are the JSON pointers removed from both sides before any
// operation: the jsonPointers of comparePatches matching the object, and
// the caBundle of webhook configurations, which cert managers inject.
func pointerPaths(obj *unstructured.Unstructured, patches []fleet.ComparePatch) []string {
	var out []string
	for _, p := range patches {
		if matches(obj, p) {
			out = append(out, p.JSONPointers...)
		}
	}
	switch obj.GetKind() {
	case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		webhooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
		for i := range webhooks {
			out = append(out, fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i))
		}
	case "CustomResourceDefinition":
		out = append(out, "/spec/conversion/webhook/clientConfig/caBundle")
	}
	return out
}

// removes reports an operation that deletes its path. An ignore without a
// path names whole objects (ignoredWhenMissing); one with a path also keeps
// ignoring that path, as this project always did, so that a fleet.yaml
// relying on it does not start a correctDrift loop over a field another
// controller writes.
func removes(op fleet.Operation) bool {
	return op.Op == "remove" || (op.Op == "ignore" && op.Path != "")
}

// applyOperations applies to doc, one side of the comparison, the
// operations of the comparePatches entries matching obj, in order, each as
// a JSON patch of its own, as Rancher Fleet does to both sides before it
// compares them: add, replace, test, move and copy as RFC 6902 has them
// (value is always a string, as fleet.yaml types it; move and copy fail,
// fleet.yaml having no from), remove (and ignore with a path) deleting the
// path where present. An operation that fails on this side, such as a
// replace of a path it lacks, is skipped, and a failing test also skips the
// rest of its entry, which it guards. Rancher instead drops every operation
// of the object on a side where one fails; skipping only the failing one
// keeps a remove of a path one side lacks from undoing the others there.
func applyOperations(doc map[string]any, obj *unstructured.Unstructured, patches []fleet.ComparePatch) map[string]any {
	for _, p := range patches {
		if !matches(obj, p) {
			continue
		}
		for _, op := range p.Operations {
			if removes(op) {
				removePointer(doc, op.Path)
				continue
			}
			if op.Op == "ignore" {
				continue
			}
			next, err := applyOperation(doc, op)
			if err == nil {
				doc = next
				continue
			}
			if op.Op == "test" {
				break
			}
		}
	}
	return doc
}

// applyOperation applies one JSON patch operation to doc, returning the
// patched copy. The value is always sent, even empty: an add or replace
// without one is no operation Rancher could apply either, and the JSON
// patch library does not survive some of them.
func applyOperation(doc map[string]any, op fleet.Operation) (out map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("operation %s %s: %v", op.Op, op.Path, r)
		}
	}()
	raw, err := json.Marshal([]map[string]string{{"op": op.Op, "path": op.Path, "value": op.Value}})
	if err != nil {
		return nil, err
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	res, err := patch.Apply(in)
	if err != nil {
		return nil, err
	}
	out = map[string]any{}
	if err := json.Unmarshal(res, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func matches(obj *unstructured.Unstructured, p fleet.ComparePatch) bool {
	return (p.Kind == "" || p.Kind == obj.GetKind()) &&
		(p.APIVersion == "" || p.APIVersion == obj.GetAPIVersion()) &&
		(p.Name == "" || p.Name == obj.GetName()) &&
		(p.Namespace == "" || p.Namespace == obj.GetNamespace())
}

// ignoredWhenMissing reports whether a comparePatches entry with the
// operation {op: ignore} covers obj. Rancher Fleet drops such objects from
// the ones to create, so an object the user deleted on purpose is neither
// reported missing nor makes the bundle Modified, and correctDrift does not
// bring it back. Matching is Rancher's: apiVersion, kind and namespace equal
// (no namespace: cluster-scoped objects only); no name matches every object
// of that kind in the namespace, otherwise the name matches exactly or as an
// unanchored regular expression (".*optional.*"). An entry whose name is not
// a valid regular expression is discarded, as in Rancher.
func ignoredWhenMissing(obj *unstructured.Unstructured, patches []fleet.ComparePatch) bool {
	for _, p := range patches {
		if !hasIgnoreOp(p) || p.APIVersion != obj.GetAPIVersion() || p.Kind != obj.GetKind() ||
			p.Namespace != obj.GetNamespace() {
			continue
		}
		re, err := regexp.Compile(p.Name)
		if err != nil {
			continue
		}
		if p.Name == "" || p.Name == obj.GetName() || re.MatchString(obj.GetName()) {
			return true
		}
	}
	return false
}

func hasIgnoreOp(p fleet.ComparePatch) bool {
	for _, op := range p.Operations {
		if op.Op == "ignore" {
			return true
		}
	}
	return false
}

// removePointer deletes the value at a JSON pointer, if present.
func removePointer(doc map[string]any, pointer string) {
	parts := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	if len(parts) == 0 || parts[0] == "" {
		return
	}
	var cur any = doc
	for i, raw := range parts {
		key := strings.ReplaceAll(strings.ReplaceAll(raw, "~1", "/"), "~0", "~")
		last := i == len(parts)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				delete(c, key)
				return
			}
			cur = c[key]
		case []any:
			idx, err := strconv.Atoi(key)
			if err != nil || idx < 0 || idx >= len(c) {
				return
			}
			if last {
				c[idx] = nil
				return
			}
			cur = c[idx]
		default:
			return
		}
	}
}

func isEmpty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	case string:
		return t == ""
	}
	return false
}

// subset reports whether every field set in d has the same value in l;
// path is where d and l are (map keys from the root).
func subset(d, l any, path []string) bool {
	switch dv := d.(type) {
	case map[string]any:
		lv, ok := l.(map[string]any)
		if !ok {
			return isEmpty(dv) && isEmpty(l)
		}
		for k, v := range dv {
			lvv, present := lv[k]
			if !present {
				if isEmpty(v) {
					continue
				}
				return false
			}
			if !subset(v, lvv, append(path, k)) {
				return false
			}
		}
		return true
	case []any:
		lv, ok := l.([]any)
		if !ok {
			return len(dv) == 0 && isEmpty(l)
		}
		if len(dv) != len(lv) {
			return false
		}
		for i := range dv {
			if !subset(dv[i], lv[i], path) {
				return false
			}
		}
		return true
	case nil:
		return true
	default:
		return leafEqual(path, d, l)
	}
}

func sameKind(a, b any) bool {
	_, as := a.(string)
	_, bs := b.(string)
	return as == bs
}

// project keeps only the parts of l that d sets, so the merge patch shows
// differences in the chart's fields and nothing else; a live value equal to
// the desired one (see leafEqual) is replaced by it.
func project(d, l any, path []string) any {
	switch dv := d.(type) {
	case map[string]any:
		lv, ok := l.(map[string]any)
		if !ok {
			return l
		}
		out := map[string]any{}
		for k, v := range dv {
			if lvv, ok := lv[k]; ok {
				out[k] = project(v, lvv, append(path, k))
			} else if isEmpty(v) {
				// An empty desired value matches an absent one.
				out[k] = v
			}
		}
		return out
	case []any:
		lv, ok := l.([]any)
		if !ok || len(lv) != len(dv) {
			return l
		}
		out := make([]any, len(lv))
		for i := range lv {
			out[i] = project(dv[i], lv[i], path)
		}
		return out
	case nil:
		return l
	}
	if leafEqual(path, d, l) {
		return d
	}
	return l
}
