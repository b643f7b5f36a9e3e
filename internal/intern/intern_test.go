package intern

import (
	"encoding/json"
	"fmt"
	"reflect"
	goruntime "runtime"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/randfill"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// deployed is a BundleDeployment as the manager's informer decodes it: the
// same bundle deployed to one cluster, reported Ready by its agent.
func deployed(t *testing.T, cluster string) *fleet.BundleDeployment {
	t.Helper()
	raw := `{"apiVersion":"fleet.cattle.io/v1alpha1","kind":"BundleDeployment",
	"metadata":{"name":"app","namespace":"cluster-fleet-default-` + cluster + `","uid":"0b5e6a38-1111-2222-3333-444455556666","resourceVersion":"42",
	  "labels":{"fleet.cattle.io/bundle-name":"app","fleet.cattle.io/bundle-namespace":"fleet-default"},
	  "managedFields":[{"manager":"fleet-controller","operation":"Update","apiVersion":"fleet.cattle.io/v1alpha1"}]},
	"spec":{"deploymentID":"s-0123456789abcdef:fedcba9876543210","stagedDeploymentID":"s-0123456789abcdef:fedcba9876543210",
	  "options":{"defaultNamespace":"default"},"stagedOptions":{"defaultNamespace":"default"}},
	"status":{"appliedDeploymentID":"s-0123456789abcdef:fedcba9876543210","ready":true,
	  "conditions":[{"type":"Ready","status":"True","reason":"Deployed","message":"","lastTransitionTime":"2026-11-23T10:00:00Z"}],
	  "resources":[{"kind":"ConfigMap","apiVersion":"v1","namespace":"default","name":"a"},
	               {"kind":"ConfigMap","apiVersion":"v1","namespace":"default","name":"b"},
	               {"kind":"ConfigMap","apiVersion":"v1","namespace":"default","name":"c"}]}}`
	bd := &fleet.BundleDeployment{}
	if err := json.Unmarshal([]byte(raw), bd); err != nil {
		t.Fatal(err)
	}
	return bd
}

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestTransformSharesRepeatedStrings(t *testing.T) {
	transform := Transform(cache.TransformStripManagedFields())
	a, b := deployed(t, "c1"), deployed(t, "c2")
	wantA, wantB := a.DeepCopy(), b.DeepCopy()
	wantA.ManagedFields, wantB.ManagedFields = nil, nil
	for _, bd := range []*fleet.BundleDeployment{a, b} {
		if _, err := transform(bd); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(a, wantA) || !reflect.DeepEqual(b, wantB) {
		t.Fatalf("interning changed a value:\n got %+v\nwant %+v", a, wantA)
	}
	shared := []struct {
		name string
		a, b string
	}{
		{"spec.deploymentID", a.Spec.DeploymentID, b.Spec.DeploymentID},
		{"spec.deploymentID and stagedDeploymentID", a.Spec.DeploymentID, a.Spec.StagedDeploymentID},
		{"spec.deploymentID and status.appliedDeploymentID", a.Spec.DeploymentID, b.Status.AppliedDeploymentID},
		{"metadata.name", a.Name, b.Name},
		{"label value", a.Labels[fleet.BundleLabel], b.Labels[fleet.BundleLabel]},
		{"spec.options.defaultNamespace", a.Spec.Options.DefaultNamespace, b.Spec.StagedOptions.DefaultNamespace},
		{"condition reason", a.Status.Conditions[0].Reason, b.Status.Conditions[0].Reason},
		{"resource kind", a.Status.Resources[0].Kind, b.Status.Resources[2].Kind},
	}
	for _, s := range shared {
		if !same(s.a, s.b) {
			t.Errorf("%s: two copies of %q", s.name, s.a)
		}
	}
	for k := range a.Labels {
		found := false
		for k2 := range b.Labels {
			found = found || same(k, k2)
		}
		if !found {
			t.Errorf("label key %q not shared", k)
		}
	}
	// Values no two objects share are not interned.
	if same(string(a.UID), string(b.UID)) || same(a.ResourceVersion, b.ResourceVersion) {
		t.Error("metadata.uid or resourceVersion was interned")
	}
	if got := cap(a.Status.Resources); got != len(a.Status.Resources) {
		t.Errorf("status.resources keeps capacity %d for %d items", got, len(a.Status.Resources))
	}
}

func TestTransformPassesOtherValuesThrough(t *testing.T) {
	tombstone := toolscache.DeletedFinalStateUnknown{Key: "ns/name", Obj: &corev1.ConfigMap{}}
	got, err := Transform(nil)(tombstone)
	if err != nil || !reflect.DeepEqual(got, tombstone) {
		t.Fatalf("got %v, %v", got, err)
	}
	long := string(make([]byte, MaxLen+1))
	if String(long) != long || !same(String(long), long) {
		t.Error("a string over MaxLen was copied")
	}
}

// TestObjectKeepsEveryValue fills every Fleet kind and a few built-in ones
// with random values, decodes them from JSON and checks that interning leaves each equal to its
// copy: the walk must not drop, reorder or alter anything, whatever the
// nesting (pointers, nil and empty slices and maps, embedded structs).
func TestObjectKeepsEveryValue(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fleet.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var types []reflect.Type
	for _, typ := range scheme.KnownTypes(fleet.GroupVersion) {
		// The scheme also lists meta types (WatchEvent, ListOptions …)
		// under every group version.
		if typ.PkgPath() == reflect.TypeFor[fleet.Bundle]().PkgPath() {
			types = append(types, typ)
		}
	}
	types = append(types, reflect.TypeFor[corev1.Namespace](), reflect.TypeFor[corev1.Secret](), reflect.TypeFor[metav1.PartialObjectMetadata]())
	f := randfill.NewWithSeed(1).NilChance(0.2).NumElements(0, 4).Funcs(
		// Values hold arbitrary JSON; randfill cannot fill an interface.
		func(m *fleet.GenericMap, c randfill.Continue) {
			m.Data = map[string]any{c.String(8): c.String(8)}
		},
		// managedFields hold JSON of their own.
		func(m *metav1.FieldsV1, c randfill.Continue) {
			m.SetRawString(`{"f:metadata":{}}`)
		},
	)
	for _, typ := range types {
		for range 50 {
			filled := reflect.New(typ).Interface()
			f.Fill(filled)
			// Decoded from JSON, as an informer's objects are: the decoder
			// leaves spare capacity in slices for the walk to trim.
			raw, err := json.Marshal(filled)
			if err != nil {
				t.Fatal(err)
			}
			obj := reflect.New(typ).Interface()
			if err := json.Unmarshal(raw, obj); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			want := obj.(runtime.Object).DeepCopyObject()
			Object(obj)
			if !reflect.DeepEqual(obj, want) {
				t.Fatalf("%s changed by interning:\n got %+v\nwant %+v", typ, obj, want)
			}
		}
	}
}

// BenchmarkRetainedDeployment reports the heap a cached BundleDeployment
// keeps, decoded as an informer decodes it, with and without interning:
// 1,000 clusters with 10 bundles each, as in the 10k-10 scale scenario.
func BenchmarkRetainedDeployment(b *testing.B) {
	t := &testing.T{}
	var raws [][]byte
	for c := range 1000 {
		for i := range 10 {
			bd := deployed(t, fmt.Sprintf("c%d", c))
			bd.Name = fmt.Sprintf("bundle-%d", i)
			bd.UID = types.UID(fmt.Sprintf("%08d-1111-2222-3333-444455556666", c*10+i))
			raw, err := json.Marshal(bd)
			if err != nil {
				b.Fatal(err)
			}
			raws = append(raws, raw)
		}
	}
	for _, mode := range []struct {
		name      string
		transform toolscache.TransformFunc
	}{
		{"stripped", cache.TransformStripManagedFields()},
		{"stripped+interned", Transform(cache.TransformStripManagedFields())},
	} {
		b.Run(mode.name, func(b *testing.B) {
			var perObject float64
			for b.Loop() {
				var before, after goruntime.MemStats
				goruntime.GC()
				goruntime.ReadMemStats(&before)
				kept := make([]any, len(raws))
				for i, raw := range raws {
					bd := &fleet.BundleDeployment{}
					if err := json.Unmarshal(raw, bd); err != nil {
						b.Fatal(err)
					}
					kept[i], _ = mode.transform(bd)
				}
				goruntime.GC()
				goruntime.ReadMemStats(&after)
				perObject = float64(after.HeapAlloc-before.HeapAlloc) / float64(len(kept))
				goruntime.KeepAlive(kept)
			}
			b.ReportMetric(perObject, "retained-B/object")
		})
	}
}
