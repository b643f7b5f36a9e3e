package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestReadyMessageNamesBundles: a Bundle's summary names the clusters its
// deployments are on; the GitRepo's Ready message and display name the
// Bundles (Rancher: "ErrApplied(2) [Bundle x: <message>]"), each message
// of a Bundle once per state, while the counts still count deployments.
func TestReadyMessageNamesBundles(t *testing.T) {
	errOn := func(clusters ...string) fleet.BundleSummary {
		s := fleet.BundleSummary{DesiredReady: len(clusters), ErrApplied: len(clusters)}
		for _, c := range clusters {
			s.NonReadyResources = append(s.NonReadyResources, fleet.NonReadyResource{
				Name: "fleet-default/" + c, State: fleet.ErrApplied, Message: "template: " + c + ": bad"})
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		bundles []fleet.Bundle
		want    string
	}{
		{name: "one bundle failing alike on two clusters is one entry, for another reason another",
			bundles: []fleet.Bundle{bundle("examples-simple", 1, 1, fleet.BundleSummary{DesiredReady: 3, ErrApplied: 3,
				NonReadyResources: []fleet.NonReadyResource{
					{Name: "fleet-default/cluster-641d0a29d2b5", State: fleet.ErrApplied, Message: "template: bad"},
					{Name: "fleet-default/cluster-77", State: fleet.ErrApplied, Message: "template: bad"},
					{Name: "fleet-default/cluster-78", State: fleet.ErrApplied, Message: "quota exceeded"},
				}})},
			want: "ErrApplied(3) [Bundle examples-simple: template: bad; Bundle examples-simple: quota exceeded]"},
		{name: "two bundles are listed by name, sorted",
			bundles: []fleet.Bundle{
				bundle("web", 1, 1, errOn("c2")),
				bundle("db", 1, 1, errOn("c1")),
			},
			want: "ErrApplied(2) [Bundle db: template: c1: bad; Bundle web: template: c2: bad]"},
		{name: "states of one bundle are listed apart",
			bundles: []fleet.Bundle{bundle("app", 1, 1, fleet.BundleSummary{DesiredReady: 3, ErrApplied: 1, WaitApplied: 2,
				NonReadyResources: []fleet.NonReadyResource{
					{Name: "ns/c1", State: fleet.WaitApplied},
					{Name: "ns/c2", State: fleet.ErrApplied, Message: "boom"},
					{Name: "ns/c3", State: fleet.WaitApplied},
				}})},
			want: "ErrApplied(1) [Bundle app: boom]; WaitApplied(2) [Bundle app]"},
		{name: "details of the first deployment are kept",
			bundles: []fleet.Bundle{bundle("app", 1, 1, fleet.BundleSummary{DesiredReady: 1, NotReady: 1,
				NonReadyResources: []fleet.NonReadyResource{{Name: "ns/c1", State: fleet.NotReady,
					NonReadyStatus: []fleet.NonReadyStatus{{Kind: "Deployment", Namespace: "web", Name: "api",
						Summary: fleet.Summary{State: "in-progress", Message: []string{"1 of 2 replicas"}}}}}}})},
			want: "NotReady(1) [Bundle app; deployment web/api in-progress: 1 of 2 replicas]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]string{}
			for _, b := range tc.bundles {
				before[b.Name] = b.Status.Summary.NonReadyResources[0].Name
			}
			bs := summarizeBundles(tc.bundles, nil)
			var st fleet.GitRepoStatus
			setBundleStatus(&st, bs)
			setConditions(&st, 1, syncOutcome{}, bs)
			c := meta.FindStatusCondition(st.Conditions, fleet.ConditionReady)
			if c == nil || c.Status != "False" || c.Message != tc.want {
				t.Fatalf("Ready = %+v\nwant message %q", c, tc.want)
			}
			if st.Display.Message != tc.want {
				t.Errorf("display message %q, want %q", st.Display.Message, tc.want)
			}
			for _, b := range tc.bundles {
				if got := b.Status.Summary.NonReadyResources[0].Name; got != before[b.Name] {
					t.Errorf("Bundle %s's own summary was changed: entry named %q, was %q", b.Name, got, before[b.Name])
				}
			}
		})
	}
}
