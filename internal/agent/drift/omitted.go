package drift

import (
	"bytes"
	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// dropServerOmitted removes from d (the desired fields compared) the zero
// scalars (false, 0) that the API server does not store: fields of a
// built-in kind that are omitempty without being pointers, such as a pod's
// hostNetwork, a Deployment's paused or minReadySeconds, a volumeMount's
// readOnly. Charts often render them explicitly; since the stored object
// can never show them, they would otherwise keep the bundle Modified
// forever, and with correctDrift roll it back on every evaluation.
//
// Which fields qualify is what a round trip of the desired object through
// its Go type (client-go's scheme) drops, as in Rancher Fleet's diff. Unlike
// there, a field is dropped only where the live object has nothing: a live
// non-zero value (hostNetwork: true) is still drift. Pointer fields keep
// their false (automountServiceAccountToken: false is stored, so its absence
// is a change), and so does every field of a kind the scheme does not know,
// custom resources included: the API server stores their false and 0 as
// given.
func dropServerOmitted(desired *unstructured.Unstructured, d, l map[string]any) {
	var paths [][]any
	zeroWhereAbsent(d, l, nil, &paths)
	if len(paths) == 0 {
		return // the common case: no typed round trip needed
	}
	typed := typedRoundTrip(desired)
	if typed == nil {
		return
	}
	for _, p := range paths {
		if parent, ok := at(typed, p[:len(p)-1]).(map[string]any); ok {
			if _, kept := parent[p[len(p)-1].(string)]; kept {
				continue
			}
			if dp, ok := at(d, p[:len(p)-1]).(map[string]any); ok {
				delete(dp, p[len(p)-1].(string))
			}
		}
	}
}

// zeroWhereAbsent collects the paths (map keys and list indexes) of the
// false and 0 values d sets where l has no field at all.
func zeroWhereAbsent(d, l any, path []any, out *[][]any) {
	switch dv := d.(type) {
	case map[string]any:
		lm, _ := l.(map[string]any)
		for k, v := range dv {
			lv, present := lm[k]
			p := append(path[:len(path):len(path)], k)
			if !present && isZeroScalar(v) {
				*out = append(*out, p)
				continue
			}
			zeroWhereAbsent(v, lv, p, out)
		}
	case []any:
		ll, _ := l.([]any)
		for i, v := range dv {
			var lv any
			if i < len(ll) {
				lv = ll[i]
			}
			zeroWhereAbsent(v, lv, append(path[:len(path):len(path)], i), out)
		}
	}
}

// isZeroScalar is false or 0. An empty string needs no typed round trip:
// subset and project already match "" with an absent field, whatever the
// kind.
func isZeroScalar(v any) bool {
	switch t := v.(type) {
	case bool:
		return !t
	case float64:
		return t == 0
	case int64:
		return t == 0
	}
	return false
}

// at walks path (map keys and list indexes) from v; nil when it leads
// nowhere.
func at(v any, path []any) any {
	for _, step := range path {
		switch s := step.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[s]
		case int:
			l, ok := v.([]any)
			if !ok || s >= len(l) {
				return nil
			}
			v = l[s]
		}
	}
	return v
}

// typedRoundTrip is the desired object as its Go type encodes it, nil when
// the scheme does not know the kind or the object does not fit the type
// (an unknown field: then nothing is dropped).
func typedRoundTrip(desired *unstructured.Unstructured) map[string]any {
	obj, err := clientgoscheme.Scheme.New(desired.GroupVersionKind())
	if err != nil {
		return nil
	}
	raw, err := json.Marshal(desired.Object)
	if err != nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil
	}
	if raw, err = json.Marshal(obj); err != nil {
		return nil
	}
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil
	}
	return out
}
