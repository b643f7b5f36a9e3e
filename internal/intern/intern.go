// Package intern makes the objects a controller caches share the memory of
// their repeated strings.
//
// At 10,000 clusters with 10 bundles each the manager caches 100,000
// BundleDeployments, and the JSON decoder gives every one of them its own
// copy of strings that are the same in thousands of them: the bundle's
// deploymentID (three times: spec, staged, applied), label keys and values,
// condition types and reasons, resource kinds. Interning those strings as an
// object enters the cache, and trimming the spare capacity the decoder leaves
// in slices, keeps one copy of each value instead of one per object.
//
// Interning never changes a value: an interned object is equal, field by
// field, to the decoded one. Strings that are unique per object by
// construction (metadata.uid, metadata.resourceVersion) are left alone, and
// so are long strings (over MaxLen bytes), which are rarely repeated.
package intern

import (
	"reflect"
	"sync"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// MaxLen is the longest string interned. Deployment IDs (two SHA-256 sums)
// are about 130 bytes; longer strings are mostly messages and values that
// differ between objects.
const MaxLen = 256

// Transform interns the strings of each object after next (for example
// controller-runtime's managedFields stripping) has run. Objects that are
// not pointers to structs pass through unchanged.
func Transform(next toolscache.TransformFunc) toolscache.TransformFunc {
	return func(in any) (any, error) {
		if next != nil {
			var err error
			if in, err = next(in); err != nil {
				return in, err
			}
		}
		Object(in)
		return in, nil
	}
}

// Object interns, in place, the strings of obj, which must be a pointer to
// a struct (anything else is ignored), and trims the spare capacity of its
// slices.
func Object(obj any) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return
	}
	walk(v.Elem())
}

// String returns the canonical copy of s.
func String(s string) string {
	if s == "" || len(s) > MaxLen {
		return s
	}
	return unique.Make(s).Value()
}

var (
	objectMetaType = reflect.TypeFor[metav1.ObjectMeta]()
	// perObject are the fields of ObjectMeta whose values no two objects
	// share: interning them would only add work.
	perObject = map[string]bool{"UID": true, "ResourceVersion": true, "ManagedFields": true}
)

var (
	// plans caches, per struct type, the indexes of the fields worth
	// walking: exported and able to hold a string or a slice.
	plans sync.Map // reflect.Type -> []int
	// worth caches holdsStrings per slice element type.
	worth sync.Map // reflect.Type -> bool
)

func worthWalking(t reflect.Type) bool {
	if w, ok := worth.Load(t); ok {
		return w.(bool)
	}
	w := holdsStrings(t, map[reflect.Type]bool{})
	worth.Store(t, w)
	return w
}

func fieldsOf(t reflect.Type) []int {
	if p, ok := plans.Load(t); ok {
		return p.([]int)
	}
	var idx []int
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || !holdsStrings(f.Type, map[reflect.Type]bool{}) {
			continue
		}
		if t == objectMetaType && perObject[f.Name] {
			continue
		}
		idx = append(idx, i)
	}
	plans.Store(t, idx)
	return idx
}

// holdsStrings reports whether a value of type t can contain a string that
// walk interns. seen breaks the cycles of recursive types.
func holdsStrings(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.String:
		return true
	case reflect.Pointer:
		return holdsStrings(t.Elem(), seen)
	case reflect.Slice:
		// Trimming a slice's capacity is worth it whatever it holds,
		// except bytes (rarely over-allocated, often large).
		return t.Elem().Kind() != reflect.Uint8
	case reflect.Map:
		return t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.IsExported() && holdsStrings(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

func walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); s != "" && len(s) <= MaxLen {
			v.SetString(unique.Make(s).Value())
		}
	case reflect.Pointer:
		if !v.IsNil() {
			walk(v.Elem())
		}
	case reflect.Struct:
		for _, i := range fieldsOf(v.Type()) {
			walk(v.Field(i))
		}
	case reflect.Slice:
		walkSlice(v)
	case reflect.Map:
		walkMap(v)
	}
}

// walkSlice interns each element and replaces a slice the decoder grew past
// its length with one of exactly its length.
func walkSlice(v reflect.Value) {
	if v.IsNil() || v.Type().Elem().Kind() == reflect.Uint8 {
		return
	}
	n := v.Len()
	if v.Cap() > n {
		trimmed := reflect.MakeSlice(v.Type(), n, n)
		reflect.Copy(trimmed, v)
		v.Set(trimmed)
	}
	if ss, ok := v.Interface().([]string); ok {
		for i, s := range ss {
			ss[i] = String(s)
		}
		return
	}
	if !worthWalking(v.Type().Elem()) {
		return
	}
	for i := range n {
		walk(v.Index(i))
	}
}

// walkMap replaces a map of strings to strings (labels, annotations,
// selectors) with one whose keys and values are interned.
func walkMap(v reflect.Value) {
	t := v.Type()
	if v.IsNil() || t.Key().Kind() != reflect.String || t.Elem().Kind() != reflect.String {
		return
	}
	if m, ok := v.Interface().(map[string]string); ok {
		out := make(map[string]string, len(m))
		for k, e := range m {
			out[String(k)] = String(e)
		}
		v.Set(reflect.ValueOf(out))
		return
	}
	out := reflect.MakeMapWithSize(t, v.Len())
	it := v.MapRange()
	for it.Next() {
		k, e := it.Key(), it.Value()
		out.SetMapIndex(reflect.ValueOf(String(k.String())).Convert(t.Key()), reflect.ValueOf(String(e.String())).Convert(t.Elem()))
	}
	v.Set(out)
}
