package drift

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// What the API server does to a manifest before storing it must not look
// like drift. Numbers need nothing: both sides are round-tripped through
// JSON, so an int in the manifest and an int64 or float64 in the live object
// are the same float64.

// normalizeDesired rewrites the desired side the way the API server stores
// it: a Secret's stringData is folded into data (stringData wins for a key
// set in both, and is never returned), and base64 values of a Secret's data
// and a ConfigMap's binaryData are re-encoded (a wrapped value's newlines are
// dropped), and a Service's fields left to the server are dropped (see
// dropServerAssigned). It reports whether it changed a Secret's or a
// ConfigMap's data.
func normalizeDesired(gvk schema.GroupVersionKind, d map[string]any) bool {
	if gvk.Group != "" {
		return false
	}
	changed := false
	switch gvk.Kind {
	case "Secret":
		changed = canonicalBase64(d["data"])
		sd, ok := d["stringData"].(map[string]any)
		if !ok {
			return changed
		}
		data, ok := d["data"].(map[string]any)
		if !ok {
			data = map[string]any{}
		}
		for k, v := range sd {
			if s, ok := v.(string); ok {
				data[k] = base64.StdEncoding.EncodeToString([]byte(s))
				delete(sd, k)
			}
		}
		d["data"] = data
		if len(sd) == 0 {
			delete(d, "stringData")
		}
		return true
	case "ConfigMap":
		changed = canonicalBase64(d["binaryData"])
	case "Service":
		dropServerAssigned(d)
	}
	return changed
}

// dropServerAssigned removes from a Service's desired spec the values that
// ask the API server to choose: a nodePort or healthCheckNodePort of 0, a
// clusterIP of "", an empty clusterIPs or ipFamilies. The server stores what
// it chose (31080, 10.43.0.12, [IPv4]), and that is no more drift than the
// value of a field the chart omits; a chart renders these zero values
// whenever its port or IP is unset. A value the chart sets (nodePort 30080,
// clusterIP None) stays compared.
func dropServerAssigned(d map[string]any) {
	spec, ok := d["spec"].(map[string]any)
	if !ok {
		return
	}
	for _, f := range []string{"healthCheckNodePort", "clusterIP", "clusterIPs", "ipFamilies"} {
		if v, set := spec[f]; set && (isEmpty(v) || isZeroScalar(v)) {
			delete(spec, f)
		}
	}
	ports, _ := spec["ports"].([]any)
	for _, p := range ports {
		if pm, ok := p.(map[string]any); ok && isZeroScalar(pm["nodePort"]) {
			delete(pm, "nodePort")
		}
	}
}

// canonicalBase64 re-encodes every decodable base64 string of a map.
func canonicalBase64(m any) bool {
	mm, ok := m.(map[string]any)
	if !ok {
		return false
	}
	changed := false
	for k, v := range mm {
		s, ok := v.(string)
		if !ok {
			continue
		}
		// StdEncoding ignores \r and \n, like the API server's decoder.
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			continue
		}
		if c := base64.StdEncoding.EncodeToString(b); c != s {
			mm[k], changed = c, true
		}
	}
	return changed
}

// leafEqual compares two scalar values found at path (the map keys from the
// object's root; list indices are left out).
//
// Besides identical values, two values are equal when they are the same
// Kubernetes quantity and the API server would have rewritten one into the
// other: a number stored as a string anywhere (only quantities are turned
// from numbers into strings: `cpu: 1` is stored "1", `cpu: 0.5` "500m"), and
// two strings in a field known to hold quantities (`memory: 1024Mi` is stored
// "1Gi"). Two arbitrary strings ("1" and "1.0" in a ConfigMap) stay different.
func leafEqual(path []string, d, l any) bool {
	if fmt.Sprint(d) == fmt.Sprint(l) && sameKind(d, l) {
		return true
	}
	ds, dStr := d.(string)
	ls, lStr := l.(string)
	switch {
	case dStr && lStr:
		if !quantityField(path) {
			return false
		}
	case dStr:
		if ls, lStr = numberString(l); !lStr {
			return false
		}
	case lStr:
		if ds, dStr = numberString(d); !dStr {
			return false
		}
	default:
		return false
	}
	return sameQuantity(ds, ls)
}

func numberString(v any) (string, bool) {
	switch n := v.(type) {
	case float64:
		return strconv.FormatFloat(n, 'f', -1, 64), true
	case int64:
		return strconv.FormatInt(n, 10), true
	case json.Number:
		return n.String(), true
	}
	return "", false
}

func sameQuantity(a, b string) bool {
	qa, err := resource.ParseQuantity(a)
	if err != nil {
		return false
	}
	qb, err := resource.ParseQuantity(b)
	if err != nil {
		return false
	}
	return qa.Cmp(qb) == 0
}

// quantityField reports whether path is a field of a built-in kind whose
// values are resource.Quantity.
func quantityField(path []string) bool {
	n := len(path)
	at := func(i int) string { // i counts from the end: at(1) is the last key
		if i > n {
			return ""
		}
		return path[n-i]
	}
	switch {
	case at(3) == "resources" && (at(2) == "limits" || at(2) == "requests"):
		// containers, pod-level resources, PVCs and volumeClaimTemplates
		return true
	case at(2) == "emptyDir" && at(1) == "sizeLimit":
		return true
	case at(2) == "overhead", at(3) == "overhead" && at(2) == "podFixed":
		// a pod's overhead, a RuntimeClass's overhead.podFixed
		return true
	case n == 3 && path[0] == "spec" && (path[1] == "hard" || path[1] == "capacity"):
		// ResourceQuota, PersistentVolume
		return true
	case n == 4 && path[0] == "spec" && path[1] == "limits":
		// LimitRange
		switch path[2] {
		case "max", "min", "default", "defaultRequest", "maxLimitRequestRatio":
			return true
		}
	case at(2) == "target" && (at(1) == "value" || at(1) == "averageValue"):
		// HorizontalPodAutoscaler metric targets
		return true
	}
	return false
}

// redacted stands for every value of a Secret in a patch.
const redacted = "(redacted)"

// redactSecretPatch replaces the values of a Secret's merge patch with a
// fixed placeholder, keeping the key names: the status says which keys
// drifted and never what they contain (status is copied to the Bundle, read
// by anyone who may read Bundles, and shown in messages). Only the metadata
// and the type are kept as they are; a key the patch removes stays null.
func redactSecretPatch(patch []byte) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, fmt.Errorf("redacting a Secret's patch: invalid JSON")
	}
	for k, v := range m {
		switch k {
		case "apiVersion", "kind", "metadata", "type", "immutable":
			continue
		}
		m[k] = redactValues(v)
	}
	return json.Marshal(m)
}

func redactValues(v any) any {
	switch t := v.(type) {
	case nil:
		return nil
	case map[string]any:
		for k, vv := range t {
			t[k] = redactValues(vv)
		}
		return t
	}
	return redacted
}
