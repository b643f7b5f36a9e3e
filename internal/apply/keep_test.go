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
// for its Schedule's window. A deployment the processed Bundle did not
// update with keepResources (its cluster no longer targeted, kept while
// off schedule) is not said to be deployed when a window opens: it is
// deleted then, its release uninstalled, whatever its stale flags say.
func TestKeepWaitingMessageNamesHolder(t *testing.T) {
	ctx := context.Background()
	const clusterNS = "keep-msg-cluster"
	if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const notUpdated = "not updated since keepResources was set: its cluster is no longer targeted " +
		"(kept only while off schedule, then deleted and its release uninstalled) or its target has an error"
	const prefix = "deleting with keepResources: waiting until every agent deployed keepResources: deployment " + clusterNS + "/"
	tests := []struct {
		name                string
		paused, offSchedule bool
		staged              bool // written with keepResources (a target)
		want                string
	}{
		{name: "keep-msg-pending", staged: true, want: "not deployed by its agent yet"},
		{name: "keep-msg-paused", paused: true, staged: true, want: "paused"},
		{name: "keep-msg-off-schedule", offSchedule: true, staged: true, want: "off schedule (held until a Schedule window of its cluster opens)"},
		{name: "keep-msg-paused-off-schedule", paused: true, offSchedule: true, staged: true, want: "paused"},
		{name: "keep-msg-untargeted-off-schedule", offSchedule: true, want: notUpdated},
		{name: "keep-msg-untargeted-stale-flags", paused: true, want: notUpdated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			owner := map[string]string{fleet.RepoLabel: tc.name}
			lbls := map[string]string{fleet.RepoLabel: tc.name, fleet.BundleNamespaceLabel: ns, fleet.BundleLabel: tc.name}
			bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: clusterNS, Name: tc.name, Labels: lbls}}
			bd.Spec.DeploymentID = "s-0123:abc"
			bd.Spec.Paused, bd.Spec.OffSchedule = tc.paused, tc.offSchedule
			bd.Spec.StagedOptions.KeepResources = tc.staged
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
