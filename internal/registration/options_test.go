package registration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestRegistrationTokenTTLRequired: with RegistrationTokenTTLRequired (on
// in the manager of optsWorkspace), a token without TTL, or with one of 0
// or less, is deleted before it gets an import credential, and a
// registration naming it is refused; a token with a TTL works.
func TestRegistrationTokenTTLRequired(t *testing.T) {
	if !optsManager.RegistrationTokenTTLRequired {
		t.Fatal("the manager of optsWorkspace must require token TTLs")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ttl  *metav1.Duration
	}{
		{name: "no-ttl"},
		{name: "zero-ttl", ttl: &metav1.Duration{}},
		{name: "negative-ttl", ttl: &metav1.Duration{Duration: -time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: optsWorkspace}, Spec: fleet.ClusterRegistrationTokenSpec{TTL: tc.ttl}}
			if err := up.Client.Create(ctx, tok); err != nil {
				t.Fatal(err)
			}
			// A registration made while the token exists: refused, or
			// unknown once the token is gone.
			reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: optsWorkspace,
				Labels: map[string]string{fleet.RegistrationTokenLabel: tc.name}},
				Spec: fleet.ClusterRegistrationSpec{ClientID: "ttl-" + tc.name, ClientRandom: "r"}}
			if err := up.Client.Create(ctx, reg); err != nil {
				t.Fatal(err)
			}
			eventually(t, "token without TTL deleted", func() error {
				err := up.Client.Get(ctx, client.ObjectKeyFromObject(tok), &fleet.ClusterRegistrationToken{})
				if !apierrors.IsNotFound(err) {
					return fmt.Errorf("token still exists: %v", err)
				}
				return nil
			})
			eventually(t, "registration refused", func() error {
				got := &fleet.ClusterRegistration{}
				if err := up.Client.Get(ctx, client.ObjectKeyFromObject(reg), got); err != nil {
					return err
				}
				if got.Status.Granted || len(got.Status.Conditions) == 0 {
					return fmt.Errorf("granted=%v conditions=%+v", got.Status.Granted, got.Status.Conditions)
				}
				if r := got.Status.Conditions[0].Reason; r != registration.ReasonTTLRequired && r != registration.ReasonUnknownToken {
					return fmt.Errorf("reason %s", r)
				}
				return nil
			})
			if cs := clustersByClientID(t, reg.Spec.ClientID); len(cs) != 0 {
				t.Errorf("a cluster was created with a token without TTL: %s", cs[0].Name)
			}
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(tok), &corev1.Secret{}); !apierrors.IsNotFound(err) {
				t.Errorf("values secret of a token without TTL: want none, got %v", err)
			}
			waitEvent(t, up, optsWorkspace, registration.ReasonTTLRequired, "registration token "+tc.name+" has no TTL")
		})
	}
	t.Run("with ttl", func(t *testing.T) {
		v := newToken(t, optsWorkspace, "with-ttl", time.Hour)
		if _, ns := registerWith(t, v, optsWorkspace, "with-ttl", "ttl-ok"); ns == "" {
			t.Errorf("no cluster namespace in the credential")
		}
		if err := up.Client.Get(ctx, client.ObjectKey{Namespace: optsWorkspace, Name: "with-ttl"}, &fleet.ClusterRegistrationToken{}); err != nil {
			t.Errorf("token with TTL: %v", err)
		}
	})
}

// TestIgnoreClusterRegistrationLabels: with IgnoreClusterRegistrationLabels
// (on in the manager of optsWorkspace), the Cluster created at
// registration gets none of the labels the agent sent, only the ones the
// manager sets itself.
func TestIgnoreClusterRegistrationLabels(t *testing.T) {
	if !optsManager.IgnoreClusterRegistrationLabels {
		t.Fatal("the manager of optsWorkspace must ignore registration labels")
	}
	ctx := context.Background()
	const clientID = "labels-ignored"
	v := newToken(t, optsWorkspace, "labels-token", time.Hour)
	reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: optsWorkspace,
		Labels: map[string]string{fleet.RegistrationTokenLabel: "labels-token"}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: "r", ClusterLabels: map[string]string{
			"env": "prod", "example.com/team": "a", fleet.CreatedByAgentPodLabel: "fleet-agent-0"}}}
	if err := clientFor(t, tokenConfig(v)).Create(ctx, reg); err != nil {
		t.Fatal(err)
	}
	var cluster fleet.Cluster
	eventually(t, "cluster created", func() error {
		cs := clustersByClientID(t, clientID)
		if len(cs) != 1 {
			return fmt.Errorf("want 1 cluster, got %d", len(cs))
		}
		cluster = cs[0]
		return nil
	})
	name := names.ClusterNameForClientID(clientID)
	want := map[string]string{fleet.ClusterLabel: name}
	if len(cluster.Labels) != len(want) || cluster.Labels[fleet.ClusterLabel] != name {
		t.Errorf("cluster labels %v, want %v", cluster.Labels, want)
	}
}

// TestValuesSecretMarksDefaultedURL: a manager whose apiServerURL was not
// configured (the one of optsWorkspace) marks its token values Secrets, so
// that `fleet install agent-token` does not hand agents its in-cluster
// address; a configured one (the shared manager) does not.
func TestValuesSecretMarksDefaultedURL(t *testing.T) {
	if !optsManager.APIServerURLDefaulted {
		t.Fatal("the manager of optsWorkspace must have a defaulted apiServerURL")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		ws   string
		want string
	}{{optsWorkspace, "true"}, {workspace, ""}} {
		newToken(t, tc.ws, "url-mark", time.Hour)
		s := &corev1.Secret{}
		if err := up.Client.Get(ctx, client.ObjectKey{Namespace: tc.ws, Name: "url-mark"}, s); err != nil {
			t.Fatal(err)
		}
		if got := s.Annotations[registration.APIServerURLDefaultedAnnotation]; got != tc.want {
			t.Errorf("%s: annotation %q, want %q", tc.ws, got, tc.want)
		}
	}
}
