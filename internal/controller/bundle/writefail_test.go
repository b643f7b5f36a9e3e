package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestWriteFailureOnStatus: when the API server refuses a BundleDeployment
// (here a ValidatingAdmissionPolicy, as a policy engine or quota would),
// the Bundle says so on its Ready condition and does not claim its
// generation as observed; once the refusal goes, the retry writes it and
// the status recovers.
func TestWriteFailureOnStatus(t *testing.T) {
	ctx := context.Background()
	ws := "ws-writefail"
	createNamespace(t, ctx, ws, nil)
	c := newCluster(t, ctx, ws, "wf1", map[string]string{"wf": "yes"}, time.Second)

	policy, binding := fleettest.Denial{
		Name: "deny-writefail", Operation: admissionv1.Create, Resource: "bundledeployments",
		Allow: "object.metadata.name != 'wf'", Message: "quota: no room for wf",
	}.Objects()
	must(t, env.Client.Create(ctx, policy))
	must(t, env.Client.Create(ctx, binding))
	// The API server applies a policy once its informer has it.
	eventually(t, 30*time.Second, func() error {
		probe := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: "wf", Namespace: c.Status.Namespace}}
		err := env.Client.Create(ctx, probe, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "no room") {
			return fmt.Errorf("policy not in force yet (%v)", err)
		}
		return nil
	})

	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "wf"},
		Spec: fleet.BundleSpec{
			Resources: resources("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"),
			Targets:   []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"wf": "yes"}}}},
		},
	}
	must(t, env.Client.Create(ctx, b))
	eventually(t, 60*time.Second, func() error {
		cur := &fleet.Bundle{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionReady)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != bundle.ReasonWriteFailed || !strings.Contains(cond.Message, "no room for wf") {
			return fmt.Errorf("conditions %+v", cur.Status.Conditions)
		}
		if cur.Status.ObservedGeneration == cur.Generation {
			return fmt.Errorf("observedGeneration %d claims the generation whose write failed", cur.Status.ObservedGeneration)
		}
		return nil
	})

	must(t, env.Client.Delete(ctx, binding))
	must(t, env.Client.Delete(ctx, policy))
	eventually(t, 90*time.Second, func() error {
		bds, err := bundleDeployments(ctx, ws, "wf")
		if err != nil || bds["wf1"] == nil {
			return fmt.Errorf("no deployment yet (%v)", err)
		}
		cur := &fleet.Bundle{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionReady)
		if cond == nil || cond.Reason == bundle.ReasonWriteFailed || cur.Status.ObservedGeneration != cur.Generation {
			return fmt.Errorf("status after the refusal went: gen %d/%d %+v", cur.Status.ObservedGeneration, cur.Generation, cur.Status.Conditions)
		}
		return nil
	})
}
