package apply_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
)

// The waiting message of a deletion with keepResources names what holds
// each deployment back, read from deployments stored in the API server: a
// cluster off schedule is not an agent that has yet to catch up, it waits
// for its Schedule's window.
func TestKeepWaitingMessageNamesHolder(t *testing.T) {
	ctx := context.Background()
	const clusterNS = "keep-msg-cluster"
	if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const prefix = "deleting with keepResources: waiting until every agent deployed keepResources: deployment " + clusterNS + "/"
	tests := []struct {
		name                string
		paused, offSchedule bool
		want                string
	}{
		{"keep-msg-pending", false, false, "not deployed by its agent yet"},
		{"keep-msg-paused", true, false, "paused"},
		{"keep-msg-off-schedule", false, true, "off schedule (its cluster's agent deploys it when a Schedule window opens)"},
		{"keep-msg-paused-off-schedule", true, true, "paused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			owner := map[string]string{fleet.RepoLabel: tc.name}
			lbls := map[string]string{fleet.RepoLabel: tc.name, fleet.BundleNamespaceLabel: ns, fleet.BundleLabel: tc.name}
			bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: clusterNS, Name: tc.name, Labels: lbls}}
			bd.Spec.DeploymentID = "s-0123:abc"
			bd.Spec.Paused, bd.Spec.OffSchedule = tc.paused, tc.offSchedule
			if err := up.Client.Create(ctx, bd); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = up.Client.Delete(context.Background(), bd) })
			got, err := apply.KeepBeforeDelete(ctx, up.Client, ns, labels.SelectorFromSet(owner))
			if err != nil {
				t.Fatal(err)
			}
			if want := prefix + tc.name + ": " + tc.want; got != want {
				t.Errorf("message\n %q\nwant\n %q", got, want)
			}
		})
	}
}
