package drift

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// optionalCM is deployed by the chart but deleted downstream on purpose.
const optionalCM = `
apiVersion: v1
kind: ConfigMap
metadata: {name: my-optional-config, namespace: app}
data: {a: "1"}
`

func ignoreEntry(apiVersion, kind, namespace, name string) fleet.ComparePatch {
	return fleet.ComparePatch{
		APIVersion: apiVersion, Kind: kind, Namespace: namespace, Name: name,
		Operations: []fleet.Operation{{Op: "ignore"}},
	}
}

// TestIgnoreOpSuppressesMissing checks Rancher's {op: ignore}: an object a
// matching entry covers is not reported missing and the bundle stays
// non-modified (so correctDrift does not re-create it); an entry that does
// not match the object changes nothing.
func TestIgnoreOpSuppressesMissing(t *testing.T) {
	absent := func(*unstructured.Unstructured) (*unstructured.Unstructured, error) { return nil, nil }
	cases := []struct {
		name       string
		patch      fleet.ComparePatch
		suppressed bool
	}{
		{name: "exact name", patch: ignoreEntry("v1", "ConfigMap", "app", "my-optional-config"), suppressed: true},
		{name: "regex name", patch: ignoreEntry("v1", "ConfigMap", "app", ".*optional.*"), suppressed: true},
		{name: "no name: whole namespace", patch: ignoreEntry("v1", "ConfigMap", "app", ""), suppressed: true},
		{name: "other namespace", patch: ignoreEntry("v1", "ConfigMap", "other", ""), suppressed: false},
		{name: "other kind", patch: ignoreEntry("v1", "Secret", "app", "my-optional-config"), suppressed: false},
		{name: "regex not matching", patch: ignoreEntry("v1", "ConfigMap", "app", "^required-.*"), suppressed: false},
		{name: "no namespace: cluster-scoped only", patch: ignoreEntry("v1", "ConfigMap", "", "my-optional-config"), suppressed: false},
		{name: "invalid regex is discarded", patch: ignoreEntry("v1", "ConfigMap", "app", "my-(optional"), suppressed: false},
		{name: "remove op is no ignore", patch: fleet.ComparePatch{
			APIVersion: "v1", Kind: "ConfigMap", Namespace: "app", Name: "my-optional-config",
			Operations: []fleet.Operation{{Op: "remove", Path: "/data"}},
		}, suppressed: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Evaluate([]*unstructured.Unstructured{obj(t, optionalCM)}, absent,
				Options{ComparePatches: []fleet.ComparePatch{tc.patch}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.suppressed {
				if res.Counts.Missing != 0 || !res.NonModified || len(res.Modified) != 0 {
					t.Fatalf("ignored object reported: missing=%d nonModified=%v modified=%+v",
						res.Counts.Missing, res.NonModified, res.Modified)
				}
				return
			}
			if res.Counts.Missing != 1 || res.NonModified || len(res.Modified) != 1 || !res.Modified[0].Create {
				t.Fatalf("missing object not reported: missing=%d nonModified=%v modified=%+v",
					res.Counts.Missing, res.NonModified, res.Modified)
			}
		})
	}
}

// TestIgnoreOpWithPathRemovesPath: an ignore operation with a path keeps
// removing that path from the comparison, as before ignore also named whole
// objects, so a field another controller writes is no drift, while a change
// elsewhere in the object still is.
func TestIgnoreOpWithPathRemovesPath(t *testing.T) {
	patch := fleet.ComparePatch{
		APIVersion: "v1", Kind: "ConfigMap", Namespace: "app", Name: "my-optional-config",
		Operations: []fleet.Operation{{Op: "ignore", Path: "/data"}},
	}
	live := obj(t, optionalCM)
	live.Object["data"] = map[string]any{"a": "2"}
	modified, _, err := Diff(obj(t, optionalCM), live, []fleet.ComparePatch{patch})
	if err != nil {
		t.Fatal(err)
	}
	if modified {
		t.Fatal("a change of the ignored path reported as drift")
	}
	desired := obj(t, optionalCM)
	desired.SetLabels(map[string]string{"tier": "a"})
	live.SetLabels(map[string]string{"tier": "b"})
	modified, _, err = Diff(desired, live, []fleet.ComparePatch{patch})
	if err != nil {
		t.Fatal(err)
	}
	if !modified {
		t.Fatal("a change outside the ignored path not reported as drift")
	}
}
