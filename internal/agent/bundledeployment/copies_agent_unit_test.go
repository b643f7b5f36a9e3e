package bundledeployment

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
)

func TestCopyOfAgent(t *testing.T) {
	const mine, other = "cattle-fleet-system", "cattle-fleet-system-b"
	bd := map[string]string{fleet.BundleDeploymentLabel: "foo"}
	with := func(agent string) map[string]string {
		return map[string]string{fleet.BundleDeploymentLabel: "foo", deployer.StorageAgentNamespaceLbl: agent}
	}
	for _, tc := range []struct {
		name           string
		labels         map[string]string
		cluster, local bool // selected cluster-wide; kept in a release namespace
	}{
		{name: "this agent's", labels: with(mine), cluster: true, local: true},
		{name: "another agent's", labels: with(other), cluster: false, local: false},
		{name: "made before copies named their agent", labels: bd, cluster: false, local: true},
		{name: "another bundle deployment's", labels: map[string]string{fleet.BundleDeploymentLabel: "bar", deployer.StorageAgentNamespaceLbl: mine}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			everywhere, err := labels.Parse(copySelector("foo", mine))
			if err != nil {
				t.Fatal(err)
			}
			if got := everywhere.Matches(labels.Set(tc.labels)) && agentCopy(tc.labels, mine, false); got != tc.cluster {
				t.Errorf("found cluster-wide = %v, want %v", got, tc.cluster)
			}
			inNS, err := labels.Parse(copySelector("foo", ""))
			if err != nil {
				t.Fatal(err)
			}
			if got := inNS.Matches(labels.Set(tc.labels)) && agentCopy(tc.labels, mine, true); got != tc.local {
				t.Errorf("found in a release namespace = %v, want %v", got, tc.local)
			}
			o := copyOwner{bd: "foo", agentNS: mine}
			if got := o.owns(tc.labels); got != tc.local {
				t.Errorf("may be updated = %v, want %v", got, tc.local)
			}
		})
	}
}

func TestSetCopiesPruned(t *testing.T) {
	deployed := func(reason, msg string) *fleet.BundleDeployment {
		return &fleet.BundleDeployment{Status: fleet.BundleDeploymentStatus{Conditions: []metav1.Condition{
			{Type: fleet.ConditionDeployed, Status: metav1.ConditionTrue, Reason: reason, Message: msg},
		}}}
	}
	failedBD := &fleet.BundleDeployment{Status: fleet.BundleDeploymentStatus{Conditions: []metav1.Condition{
		{Type: fleet.ConditionDeployed, Status: metav1.ConditionFalse, Reason: ReasonDeployError, Message: "boom"},
	}}}
	denied := errors.New("configmaps \"c\" is forbidden")
	for _, tc := range []struct {
		name        string
		bd          *fleet.BundleDeployment
		err         error
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage bool
		wantDue     bool
	}{
		{name: "deletion failed", bd: deployed(ReasonDeployed, ""), err: denied,
			wantStatus: metav1.ConditionTrue, wantReason: ReasonStaleCopies, wantMessage: true, wantDue: true},
		{name: "deletion failed again", bd: deployed(ReasonStaleCopies, "old"), err: denied,
			wantStatus: metav1.ConditionTrue, wantReason: ReasonStaleCopies, wantMessage: true, wantDue: true},
		{name: "deleted after failing", bd: deployed(ReasonStaleCopies, "old"),
			wantStatus: metav1.ConditionTrue, wantReason: ReasonDeployed},
		{name: "deleted at once", bd: deployed(ReasonDeployed, ""),
			wantStatus: metav1.ConditionTrue, wantReason: ReasonDeployed},
		{name: "deploy error left alone", bd: failedBD, err: denied,
			wantStatus: metav1.ConditionFalse, wantReason: ReasonDeployError, wantMessage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setCopiesPruned(tc.bd, tc.err)
			c := meta.FindStatusCondition(tc.bd.Status.Conditions, fleet.ConditionDeployed)
			if c.Status != tc.wantStatus || c.Reason != tc.wantReason || (c.Message != "") != tc.wantMessage {
				t.Fatalf("Deployed condition %+v, want status %s reason %s message %v", c, tc.wantStatus, tc.wantReason, tc.wantMessage)
			}
			if tc.err != nil && tc.wantReason == ReasonStaleCopies && c.Message == tc.err.Error() {
				t.Fatalf("message %q does not say the deploy stands", c.Message)
			}
			if got := staleCopiesReported(tc.bd); got != tc.wantDue {
				t.Fatalf("staleCopiesReported = %v, want %v", got, tc.wantDue)
			}
		})
	}
}
