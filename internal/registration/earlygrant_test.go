package registration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// TestReadGrantBeforeCredential: the import token may read (list and watch
// by name) its hand-over Secret as soon as the manager has seen the
// registration, before the credential exists, so that the agent waits on
// a watch instead of polling; nothing else in the namespace is readable;
// deleting the registration removes the grant. The cluster's namespace is
// held terminating (no namespace controller runs here), so the grant stops
// before the credential.
func TestReadGrantBeforeCredential(t *testing.T) {
	ctx := context.Background()
	const clientID, random = "early-grant", "r1"
	terminatingClusterNamespace(t, ctx, clientID)

	v := newToken(t, workspace, "early-token", time.Hour)
	tokenClient := clientFor(t, tokenConfig(v))
	reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: workspace,
		Labels: map[string]string{fleet.RegistrationTokenLabel: "early-token"}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: random}}
	if err := tokenClient.Create(ctx, reg); err != nil {
		t.Fatal(err)
	}
	secretName := names.RegistrationSecretName(clientID, random)
	sysNS := client.InNamespace(fleet.DefaultSystemRegistrationNamespace)
	eventually(t, "the token may list its hand-over secret by name", func() error {
		return tokenClient.List(ctx, &corev1.SecretList{}, sysNS, client.MatchingFields{"metadata.name": secretName})
	})
	// Held for a while: the credential never came, the grant stays.
	time.Sleep(2 * time.Second)
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemRegistrationNamespace, Name: secretName}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("hand-over secret: want none before the credential, got %v", err)
	}
	got := &fleet.ClusterRegistration{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(reg), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Granted {
		t.Fatalf("registration granted although its cluster namespace is terminating")
	}
	wantForbidden(t, "list the namespace's secrets", tokenClient.List(ctx, &corev1.SecretList{}, sysNS))
	wantForbidden(t, "list another secret by name", tokenClient.List(ctx, &corev1.SecretList{}, sysNS,
		client.MatchingFields{"metadata.name": names.RegistrationSecretName(clientID, "other")}))

	if err := up.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	eventually(t, "read grant removed with the registration", func() error {
		var roles rbacv1.RoleList
		if err := up.Client.List(ctx, &roles, sysNS); err != nil {
			return err
		}
		for _, r := range roles.Items {
			if r.Name == secretName+"-creds" {
				return fmt.Errorf("role %s still there", r.Name)
			}
		}
		err := up.Client.Get(ctx, client.ObjectKeyFromObject(reg), &fleet.ClusterRegistration{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("registration still there: %v", err)
		}
		return nil
	})
	for _, c := range clustersByClientID(t, clientID) {
		_ = up.Client.Delete(ctx, &c)
	}
}
