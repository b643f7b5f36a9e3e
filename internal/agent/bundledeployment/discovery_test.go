package bundledeployment_test

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// The agent keeps one discovery cache for all its deploys. A kind whose CRD
// was created downstream by someone else after the cache was filled must
// still deploy: a miss refreshes the cache.
func TestKindCreatedOutsideTheBundleAfterDiscovery(t *testing.T) {
	ctx := context.Background()
	// Fill the cache with a deploy before the CRD exists.
	first := put(t, bundle{name: "disc-first", files: map[string]string{"cm.yaml": rawCM},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "disc-ns"}})
	waitState(t, "disc-first", first, fleet.Ready)

	crd := &unstructured.Unstructured{}
	must(t, yaml.Unmarshal([]byte(crdYAML("example.org", "Sprocket")), &crd.Object))
	must(t, down.Client.Create(ctx, crd))
	eventually(t, "CRD sprockets.example.org established", func() error {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(crd.GroupVersionKind())
		if err := down.Client.Get(ctx, client.ObjectKey{Name: crd.GetName()}, live); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", conds)
	})

	id := put(t, bundle{name: "disc-cr", files: map[string]string{
		"sprocket.yaml": "apiVersion: example.org/v1\nkind: Sprocket\nmetadata:\n  name: s1\nspec:\n  teeth: 12\n",
	}, opts: fleet.BundleDeploymentOptions{DefaultNamespace: "disc-ns"}})
	waitState(t, "disc-cr", id, fleet.Ready)
	s := &unstructured.Unstructured{}
	s.SetAPIVersion("example.org/v1")
	s.SetKind("Sprocket")
	must(t, down.Client.Get(ctx, client.ObjectKey{Namespace: "disc-ns", Name: "s1"}, s))
	if teeth, _, _ := unstructured.NestedInt64(s.Object, "spec", "teeth"); teeth != 12 {
		t.Fatalf("sprocket spec %v", s.Object["spec"])
	}
}
