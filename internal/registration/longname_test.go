package registration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestClusterNameTooLong: a Cluster created by hand with a name longer
// than a label value may be (70 characters; its BundleDeployments and
// agent credentials are labelled with it) says so on its status —
// Processed=False, reason InvalidName, a message naming the limit and the
// fix — with one Warning Event. It gets no namespace (so no bundle targets
// it), it is not imported although it names a kubeconfig Secret
// (manager-initiated registration), an agent registering for it is
// refused with the same reason instead of retrying refused writes, and
// the Cluster can still be deleted.
func TestClusterNameTooLong(t *testing.T) {
	ctx := context.Background()
	name := "long-cluster-" + strings.Repeat("x", 70-len("long-cluster-"))
	const clientID = "long-cluster-agent"
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workspace},
		Spec: fleet.ClusterSpec{ClientID: clientID, KubeConfigSecret: "long-cluster-kubeconfig"}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cluster)

	eventually(t, "the cluster is refused for its name", func() error {
		got := &fleet.Cluster{}
		if err := up.Client.Get(ctx, key, got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionProcessed)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != registration.ReasonInvalidName {
			return fmt.Errorf("conditions %+v", got.Status.Conditions)
		}
		for _, want := range []string{"70 characters", "at most 63", fleet.ClusterLabel, "No bundle can target", "shorter name"} {
			if !strings.Contains(c.Message, want) {
				return fmt.Errorf("message %q does not say %q", c.Message, want)
			}
		}
		if got.Status.Namespace != "" {
			return fmt.Errorf("status.namespace %q", got.Status.Namespace)
		}
		if imp := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionImported); imp != nil {
			return fmt.Errorf("import attempted: %+v", imp)
		}
		return nil
	})
	if err := up.Client.Get(ctx, client.ObjectKey{Name: names.ClusterNamespace(workspace, name)}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster namespace of the refused cluster: %v", err)
	}

	// An agent registering for it is refused, not granted in a loop.
	v := newToken(t, workspace, "long-cluster-token", time.Hour)
	reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: workspace,
		Labels: map[string]string{fleet.RegistrationTokenLabel: "long-cluster-token"}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: "r1"}}
	if err := clientFor(t, tokenConfig(v)).Create(ctx, reg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the registration is refused", func() error {
		got := &fleet.ClusterRegistration{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(reg), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, registration.ConditionGranted)
		if got.Status.Granted || c == nil || c.Status != metav1.ConditionFalse || c.Reason != registration.ReasonInvalidName {
			return fmt.Errorf("granted %v, conditions %+v", got.Status.Granted, got.Status.Conditions)
		}
		return nil
	})

	// One Warning Event, however often the Cluster is reconciled (a label
	// change is one more reconcile).
	got := &fleet.Cluster{}
	if err := up.Client.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	got.Labels = map[string]string{"touched": "yes"}
	if err := up.Client.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	eventually(t, "one InvalidName event", func() error {
		var list eventsv1.EventList
		if err := up.Client.List(ctx, &list, client.InNamespace(workspace)); err != nil {
			return err
		}
		var found []eventsv1.Event
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == registration.ReasonInvalidName {
				found = append(found, e)
			}
		}
		if len(found) != 1 {
			return fmt.Errorf("%d events", len(found))
		}
		if e := found[0]; e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, "at most 63") || (e.Series != nil && e.Series.Count > 1) {
			return fmt.Errorf("event %s %q series %+v", e.Type, e.Note, e.Series)
		}
		return nil
	})

	if err := up.Client.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the refused cluster is deleted", func() error {
		err := up.Client.Get(ctx, key, &fleet.Cluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
}
