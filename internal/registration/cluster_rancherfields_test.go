package registration_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// rancherClusterManifest is a Cluster as Rancher Fleet users write it,
// carrying agentSchedulingCustomization and agentPullSecrets (Ref §1.7).
// The manifest is kept as YAML, not as a typed Cluster, so the test is
// exactly what `kubectl apply` sends and compiles whether or not the Go
// type knows the fields.
const rancherClusterManifest = `
apiVersion: fleet.cattle.io/v1alpha1
kind: Cluster
metadata:
  name: rancher-fields
  namespace: clusters
spec:
  agentPullSecrets:
  - name: regcred
  agentSchedulingCustomization:
    priorityClass:
      value: 1000
      preemptionPolicy: PreemptLowerPriority
    podDisruptionBudget:
      minAvailable: "1"
      maxUnavailable: "0"
`

// TestClusterRancherAgentFieldsAcceptedStrict checks that an existing
// Rancher Cluster manifest using the agent scheduling customization and
// agent pull secrets is accepted under strict field validation (the
// kubectl apply default) and that both fields read back unchanged, through
// the raw API and through the Go type the manager reads and writes
// Clusters with (a field the type lacks would be dropped on its updates).
func TestClusterRancherAgentFieldsAcceptedStrict(t *testing.T) {
	ctx := context.Background()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(rancherClusterManifest), &obj.Object); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	for _, f := range []string{"agentPullSecrets", "agentSchedulingCustomization"} {
		v, ok, err := unstructured.NestedFieldCopy(obj.Object, "spec", f)
		if err != nil || !ok {
			t.Fatalf("manifest lacks spec.%s: %v", f, err)
		}
		want[f] = v
	}
	if err := up.Client.Create(ctx, obj, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("strict create of a Rancher Cluster manifest refused: %v", err)
	}
	t.Cleanup(func() { _ = up.Client.Delete(context.Background(), obj) })

	raw := &unstructured.Unstructured{}
	raw.SetGroupVersionKind(obj.GroupVersionKind())
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(obj), raw); err != nil {
		t.Fatal(err)
	}
	assertSpecFields(t, "API server", raw.Object, want)

	typed := &fleet.Cluster{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(obj), typed); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(typed)
	if err != nil {
		t.Fatal(err)
	}
	viaType := map[string]any{}
	if err := json.Unmarshal(b, &viaType); err != nil {
		t.Fatal(err)
	}
	assertSpecFields(t, "Go type", viaType, want)
}

// assertSpecFields fails unless each spec field of want is in obj,
// unchanged. Both sides are compared after a JSON round trip so that
// numbers have one representation.
func assertSpecFields(t *testing.T, via string, obj, want map[string]any) {
	t.Helper()
	for f, w := range want {
		got, _, _ := unstructured.NestedFieldNoCopy(obj, "spec", f)
		if !reflect.DeepEqual(normalize(t, got), normalize(t, w)) {
			t.Errorf("%s: spec.%s = %v, want %v", via, f, got, w)
		}
	}
}

// normalize round-trips v through JSON.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
