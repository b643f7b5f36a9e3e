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
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestDeletedClusterStaysDeleted: deleting a Cluster removes the
// registrations that wait for it too, so that none of them creates the
// Cluster again. The registration here asked for the content API hand-over
// (its agent set the finalizer, so the manager gave it no owner reference)
// and is not granted yet: its cluster namespace is held terminating (no
// namespace controller runs here), so the credential cannot be written.
func TestDeletedClusterStaysDeleted(t *testing.T) {
	ctx := context.Background()
	const clientID, random = "deleted-cluster", "r1"
	terminatingClusterNamespace(t, ctx, clientID)

	v := newToken(t, workspace, "delete-token", time.Hour)
	reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "request-deleted-1", Namespace: workspace,
		Labels:      map[string]string{fleet.RegistrationTokenLabel: "delete-token"},
		Annotations: map[string]string{contentapi.HandoverAnnotation: contentapi.HandoverContentAPI},
		Finalizers:  []string{fleet.ClusterRegistrationFinalizer}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: random}}
	if err := clientFor(t, tokenConfig(v)).Create(ctx, reg); err != nil {
		t.Fatal(err)
	}
	var cluster fleet.Cluster
	eventually(t, "the registration created its cluster", func() error {
		cs := clustersByClientID(t, clientID)
		if len(cs) != 1 {
			return fmt.Errorf("want 1 cluster, got %d", len(cs))
		}
		cluster = cs[0]
		return nil
	})
	got := &fleet.ClusterRegistration{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(reg), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Granted || got.Status.ClusterName != "" || len(got.OwnerReferences) != 0 {
		t.Fatalf("want a registration waiting without owner: granted=%v clusterName=%q owners=%v",
			got.Status.Granted, got.Status.ClusterName, got.OwnerReferences)
	}

	if err := up.Client.Delete(ctx, &cluster); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cluster is deleted", func() error {
		c := &fleet.Cluster{}
		err := up.Client.Get(ctx, client.ObjectKeyFromObject(&cluster), c)
		if apierrors.IsNotFound(err) || err == nil && c.UID != cluster.UID {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	// The registration used to retry every few seconds (and its Cluster's
	// deletion woke it at once): give it the time to come back.
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if cs := clustersByClientID(t, clientID); len(cs) != 0 {
			t.Fatalf("the deleted cluster came back: %s/%s (uid %s, was %s)", cs[0].Namespace, cs[0].Name, cs[0].UID, cluster.UID)
		}
		time.Sleep(250 * time.Millisecond)
	}
	eventually(t, "the waiting registration is deleted with its cluster", func() error {
		err := up.Client.Get(ctx, client.ObjectKeyFromObject(reg), &fleet.ClusterRegistration{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
}

// TestRevokeWithoutGrantedStatus: the grant writes the credential before
// it marks the registration granted (status.clusterName); when that status
// write fails and the registration is deleted before a retry, deleting it
// still revokes the credential. The failed status write is played by
// resetting the status of a granted registration.
func TestRevokeWithoutGrantedStatus(t *testing.T) {
	ctx := context.Background()
	const clientID = "revoke-unmarked"
	v := newToken(t, workspace, "revoke-token", time.Hour)
	reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "request-revoke-1", Namespace: workspace,
		Labels:      map[string]string{fleet.RegistrationTokenLabel: "revoke-token"},
		Annotations: map[string]string{contentapi.HandoverAnnotation: contentapi.HandoverContentAPI},
		Finalizers:  []string{fleet.ClusterRegistrationFinalizer}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: "r1"}}
	if err := clientFor(t, tokenConfig(v)).Create(ctx, reg); err != nil {
		t.Fatal(err)
	}
	got := &fleet.ClusterRegistration{}
	eventually(t, "granted", func() error {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(reg), got); err != nil {
			return err
		}
		if !got.Status.Granted {
			return fmt.Errorf("not granted: %+v", got.Status)
		}
		return nil
	})
	sa := &corev1.ServiceAccount{}
	saKey := client.ObjectKey{Namespace: names.ClusterNamespace(workspace, got.Status.ClusterName), Name: registration.RequestSAName(got)}
	if err := up.Client.Get(ctx, saKey, sa); err != nil {
		t.Fatalf("credential ServiceAccount: %v", err)
	}
	got.Status = fleet.ClusterRegistrationStatus{}
	if err := up.Client.Status().Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := up.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 20*time.Second, func() error {
		err := up.Client.Get(ctx, saKey, &corev1.ServiceAccount{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the credential's ServiceAccount is still there: %v", err)
	})
	for _, c := range clustersByClientID(t, clientID) {
		_ = up.Client.Delete(ctx, &c)
	}
}

// TestForeignFinalizerDoesNotHoldCluster: whoever holds a registration
// token may create registrations with any metadata, a finalizer of its own
// among it, and the clientID of a cluster it wants to keep. Deleting that
// Cluster revokes and deletes the registration, and the Cluster is gone
// although the registration stays, held by the finalizer nobody removes:
// the manager does not wait for what it cannot finish.
func TestForeignFinalizerDoesNotHoldCluster(t *testing.T) {
	ctx := context.Background()
	const clientID, foreign = "victim-client", "example.com/never"
	victim := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: workspace},
		Spec: fleet.ClusterSpec{ClientID: clientID}}
	if err := up.Client.Create(ctx, victim); err != nil {
		t.Fatal(err)
	}
	v := newToken(t, workspace, "rogue-token", time.Hour)
	rogue := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "request-x", Namespace: workspace,
		Labels:     map[string]string{fleet.RegistrationTokenLabel: "rogue-token"},
		Finalizers: []string{foreign}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: "r1"}}
	if err := clientFor(t, tokenConfig(v)).Create(ctx, rogue); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		got := &fleet.ClusterRegistration{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(rogue), got); err == nil {
			got.Finalizers = nil
			_ = up.Client.Update(ctx, got)
		}
	})
	got := &fleet.ClusterRegistration{}
	eventually(t, "the registration is granted for the victim", func() error {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(rogue), got); err != nil {
			return err
		}
		if !got.Status.Granted || got.Status.ClusterName != victim.Name {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	saKey := client.ObjectKey{Namespace: names.ClusterNamespace(workspace, victim.Name), Name: registration.RequestSAName(got)}

	if err := up.Client.Delete(ctx, victim); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the victim cluster is deleted", func() error {
		c := &fleet.Cluster{}
		err := up.Client.Get(ctx, client.ObjectKeyFromObject(victim), c)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (deleting since %v, finalizers %v): %v", c.DeletionTimestamp, c.Finalizers, err)
	})
	if err := up.Client.Get(ctx, saKey, &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("the registration's credential ServiceAccount is not revoked: %v", err)
	}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(rogue), got); err != nil {
		t.Fatalf("the registration with the foreign finalizer: %v", err)
	}
	if got.DeletionTimestamp.IsZero() || len(got.Finalizers) != 1 || got.Finalizers[0] != foreign {
		t.Errorf("want the registration deleting, held by %s alone: deletionTimestamp %v, finalizers %v", foreign, got.DeletionTimestamp, got.Finalizers)
	}
	if cs := clustersByClientID(t, clientID); len(cs) != 0 {
		t.Errorf("the deleted cluster came back: %s/%s", cs[0].Namespace, cs[0].Name)
	}
}
