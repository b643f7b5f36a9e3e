package summary

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func bd(staged, current, applied string, ready, nonModified bool, conds ...metav1.Condition) *fleet.BundleDeployment {
	return &fleet.BundleDeployment{
		Spec:   fleet.BundleDeploymentSpec{StagedDeploymentID: staged, DeploymentID: current},
		Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: applied, Ready: ready, NonModified: nonModified, Conditions: conds},
	}
}

func TestDeploymentState(t *testing.T) {
	deployedFalse := metav1.Condition{Type: fleet.ConditionDeployed, Status: metav1.ConditionFalse, Message: "boom"}
	offline := metav1.Condition{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue, Message: "agent offline"}
	// reported is ReportedState's answer: the same without the Offline
	// mark.
	cases := []struct {
		name           string
		bd             *fleet.BundleDeployment
		want, reported fleet.BundleState
	}{
		{"applied differs, deploy failed", bd("a", "a", "old", true, true, deployedFalse), fleet.ErrApplied, fleet.ErrApplied},
		{"applied differs", bd("a", "a", "old", true, true), fleet.WaitApplied, fleet.WaitApplied},
		// A redeploy of the applied deploymentID failed (e.g. a copied
		// Secret is gone): the agent reports Deployed=False, not ready.
		{"applied, redeploy failed", bd("a", "a", "a", false, true, deployedFalse), fleet.ErrApplied, fleet.ErrApplied},
		{"not ready", bd("a", "a", "a", false, true), fleet.NotReady, fleet.NotReady},
		{"staged differs", bd("b", "a", "a", true, true), fleet.OutOfSync, fleet.OutOfSync},
		{"modified", bd("a", "a", "a", true, false), fleet.Modified, fleet.Modified},
		{"ready", bd("a", "a", "a", true, true), fleet.Ready, fleet.Ready},
		{"offline wins", bd("a", "a", "old", false, false, offline), fleet.Offline, fleet.WaitApplied},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := DeploymentState(c.bd); got != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
			if got := ReportedState(c.bd); got != c.reported {
				t.Fatalf("ReportedState: got %s, want %s", got, c.reported)
			}
		})
	}
}

func TestIncrementCapsNonReady(t *testing.T) {
	var s fleet.BundleSummary
	for i := 0; i < 25; i++ {
		Increment(&s, fmt.Sprintf("c%d", i), fleet.NotReady, bd("a", "a", "a", false, true))
	}
	Increment(&s, "ok", fleet.Ready, bd("a", "a", "a", true, true))
	Increment(&s, "new", fleet.Pending, nil)
	if s.NotReady != 25 || s.Ready != 1 || s.Pending != 1 || s.DesiredReady != 27 {
		t.Fatalf("counts wrong: %+v", s)
	}
	if len(s.NonReadyResources) != MaxNonReadyResources {
		t.Fatalf("nonReadyResources has %d entries, want %d", len(s.NonReadyResources), MaxNonReadyResources)
	}
	if WorstState(s) != fleet.Pending {
		t.Fatalf("worst = %s", WorstState(s))
	}
	if ReadyCount(s) != "1/27" {
		t.Fatalf("ReadyCount = %s", ReadyCount(s))
	}
}

func TestReadyMessage(t *testing.T) {
	cases := []struct {
		name string
		s    fleet.BundleSummary
		want string
	}{
		{"all ready", fleet.BundleSummary{Ready: 2, DesiredReady: 2}, ""},
		{"one waiting", fleet.BundleSummary{WaitApplied: 1, DesiredReady: 1, NonReadyResources: []fleet.NonReadyResource{{Name: "x", State: fleet.WaitApplied}}}, "WaitApplied(1) [Bundle x]"},
		{
			"two states sorted with details",
			fleet.BundleSummary{NotReady: 1, ErrApplied: 1, DesiredReady: 2, NonReadyResources: []fleet.NonReadyResource{
				{Name: "b", State: fleet.NotReady, NonReadyStatus: []fleet.NonReadyStatus{{Kind: "Deployment", Namespace: "ns", Name: "web", Summary: fleet.Summary{State: "in-progress", Message: []string{"1 of 2 ready"}}}}},
				{Name: "a", State: fleet.ErrApplied, Message: "chart not found"},
			}},
			"ErrApplied(1) [Bundle a: chart not found]; NotReady(1) [Bundle b; deployment ns/web in-progress: 1 of 2 ready]",
		},
		{"count beyond the listed entries", fleet.BundleSummary{Modified: 3, DesiredReady: 3, NonReadyResources: []fleet.NonReadyResource{{Name: "m", State: fleet.Modified, ModifiedStatus: []fleet.ModifiedStatus{{Kind: "ConfigMap", Namespace: "d", Name: "cm", Create: true}}}}}, "Modified(3) [Bundle m; configmap d/cm missing]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ReadyMessage(c.s, "Bundle"); got != c.want {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestAdd(t *testing.T) {
	a := fleet.BundleSummary{Ready: 1, DesiredReady: 2, NotReady: 1, NonReadyResources: make([]fleet.NonReadyResource, 9)}
	b := fleet.BundleSummary{Ready: 3, DesiredReady: 4, Offline: 1, NonReadyResources: make([]fleet.NonReadyResource, 5)}
	Add(&a, b)
	if a.Ready != 4 || a.DesiredReady != 6 || a.Offline != 1 || a.NotReady != 1 || len(a.NonReadyResources) != MaxNonReadyResources {
		t.Fatalf("bad sum: %+v (%d entries)", a, len(a.NonReadyResources))
	}
}

// TestIncrementSharesNoMemoryWithTheDeployment: the deployments passed in
// are often an informer cache's own objects, and the summary is later the
// target of a decoded API response; writing into the summary must never
// change the deployment.
func TestIncrementSharesNoMemoryWithTheDeployment(t *testing.T) {
	bd := &fleet.BundleDeployment{}
	bd.Status.NonReadyStatus = []fleet.NonReadyStatus{{Kind: "Deployment", Name: "web", Summary: fleet.Summary{State: "in-progress", Message: []string{"1 of 2 ready"}}}}
	bd.Status.ModifiedStatus = []fleet.ModifiedStatus{{Kind: "ConfigMap", Name: "cm", Patch: "{}"}}
	var s fleet.BundleSummary
	Increment(&s, "ws/c1", fleet.NotReady, bd)
	if len(s.NonReadyResources) != 1 || len(s.NonReadyResources[0].NonReadyStatus) != 1 {
		t.Fatalf("summary %+v", s)
	}
	r := &s.NonReadyResources[0]
	r.NonReadyStatus[0].Summary.Message[0] = "changed"
	r.NonReadyStatus[0].Name = "changed"
	r.ModifiedStatus[0].Patch = "changed"
	if got := bd.Status.NonReadyStatus[0]; got.Name != "web" || got.Summary.Message[0] != "1 of 2 ready" {
		t.Fatalf("the deployment's nonReadyStatus changed with the summary: %+v", got)
	}
	if bd.Status.ModifiedStatus[0].Patch != "{}" {
		t.Fatalf("the deployment's modifiedStatus changed with the summary: %+v", bd.Status.ModifiedStatus[0])
	}
}
