package simulator

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/summary"
)

func TestReadyStatusIsReadyForTheManager(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		bd   fleet.BundleDeployment
	}{
		{name: "first deployment", bd: fleet.BundleDeployment{Spec: fleet.BundleDeploymentSpec{
			DeploymentID: "s-abc:1", StagedDeploymentID: "s-abc:1"}}},
		{name: "replaces an error", bd: fleet.BundleDeployment{
			ObjectMeta: metav1.ObjectMeta{Generation: 3},
			Spec:       fleet.BundleDeploymentSpec{DeploymentID: "s-new:1", StagedDeploymentID: "s-new:1"},
			Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "s-old:1", Conditions: []metav1.Condition{
				{Type: fleet.ConditionDeployed, Status: metav1.ConditionFalse, Reason: "DeployError", Message: "boom"},
				{Type: "Custom", Status: metav1.ConditionTrue, Reason: "Kept"}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := []fleet.BundleDeploymentResource{{Kind: "ConfigMap", APIVersion: "v1", Namespace: "sim00001", Name: "a"}}
			tc.bd.Status = readyStatus(&tc.bd, report{release: "sim00001/b:1", resources: res}, now)
			if got := summary.DeploymentState(&tc.bd); got != fleet.Ready {
				t.Fatalf("state = %s, want Ready", got)
			}
			for _, typ := range []string{fleet.ConditionInstalled, fleet.ConditionDeployed, fleet.ConditionMonitored, fleet.ConditionReady} {
				c := meta.FindStatusCondition(tc.bd.Status.Conditions, typ)
				if c == nil || c.Status != metav1.ConditionTrue || c.Message != "" || c.ObservedGeneration != tc.bd.Generation {
					t.Errorf("condition %s = %+v", typ, c)
				}
			}
			if tc.name == "replaces an error" && meta.FindStatusCondition(tc.bd.Status.Conditions, "Custom") == nil {
				t.Error("other conditions must be kept")
			}
			if tc.bd.Status.Release != "sim00001/b:1" || tc.bd.Status.ResourceCounts.Ready != 1 || tc.bd.Status.ResourceCounts.DesiredReady != 1 {
				t.Errorf("status = %+v", tc.bd.Status)
			}
		})
	}
}

func TestResourcesOf(t *testing.T) {
	m, err := manifest.New([]fleet.BundleResource{
		{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n  namespace: other\n"},
		{Name: "overlays/prod/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ignored\n"},
		{Name: "README.md", Content: "kind: ConfigMap"},
		{Name: "empty.yaml", Content: "# nothing\n"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := resourcesOf(m, "sim00007")
	want := []fleet.BundleDeploymentResource{
		{Kind: "ConfigMap", APIVersion: "v1", Namespace: "sim00007", Name: "a"},
		{Kind: "Secret", APIVersion: "v1", Namespace: "other", Name: "b"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestResourcesOfCached checks that the per-process cache of a manifest's
// objects gives each agent its own namespace.
func TestResourcesOfCached(t *testing.T) {
	m, err := manifest.New([]fleet.BundleResource{
		{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n  namespace: other\n"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := &Simulator{}
	for _, ns := range []string{"sim00001", "sim00002", "sim00001"} {
		got := s.resourcesOf("s-abc", m, ns)
		if len(got) != 2 || got[0].Namespace != ns || got[1].Namespace != "other" {
			t.Errorf("agent %s got %+v", ns, got)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": StatusOnly, "status-only": StatusOnly, "real": RealApply} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("fake"); err == nil {
		t.Error("ParseMode(fake) must fail")
	}
}
