package registration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestCredentialHandoverThroughAPI: a registration that asks for the
// content API hand-over gets a working credential for its own cluster
// namespace from the manager, and nothing is written for the hand-over (no
// Secret, no read grant); only its token's ServiceAccount gets it; a
// refused registration is told why; deleting the registration revokes
// what was handed out. (The aggregation layer in front, and its RBAC, are
// covered by test/e2e.)
func TestCredentialHandoverThroughAPI(t *testing.T) {
	ctx := context.Background()
	v := newToken(t, workspace, "api-token", time.Hour)
	newToken(t, workspace, "api-other-token", time.Hour)
	userOf := func(name string) string {
		tok := &fleet.ClusterRegistrationToken{}
		if err := up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: name}, tok); err != nil {
			t.Fatal(err)
		}
		return "system:serviceaccount:" + workspace + ":" + registration.TokenSAName(tok)
	}
	owner, other := userOf("api-token"), userOf("api-other-token")
	tokenClient := clientFor(t, tokenConfig(v))
	newRegistration := func(name string, spec fleet.ClusterRegistrationSpec) *fleet.ClusterRegistration {
		reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workspace,
			Labels:      map[string]string{fleet.RegistrationTokenLabel: "api-token"},
			Annotations: map[string]string{contentapi.HandoverAnnotation: contentapi.HandoverContentAPI},
			// As the agent sets it with this hand-over.
			Finalizers: []string{fleet.ClusterRegistrationFinalizer}}, Spec: spec}
		if err := tokenClient.Create(ctx, reg); err != nil {
			t.Fatal(err)
		}
		return reg
	}
	const clientID, random = "api-handover", "r1"
	reg := newRegistration("request-api-1", fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: random})

	// A watch started before the grant returns with it.
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cred, err := creds.Credential(wctx, contentapi.CredentialRequest{User: owner, Namespace: workspace, Name: reg.Name, Wait: true})
	if err != nil || cred == nil {
		t.Fatalf("credential: %v, %v", cred, err)
	}
	cluster := names.ClusterNameForClientID(clientID)
	if cred.ClusterName != cluster || cred.ClusterNamespace != workspace || cred.DeploymentNamespace != names.ClusterNamespace(workspace, cluster) {
		t.Errorf("credential names cluster %s/%s in %s; want %s/%s in %s", cred.ClusterNamespace, cred.ClusterName, cred.DeploymentNamespace,
			workspace, cluster, names.ClusterNamespace(workspace, cluster))
	}

	agentClient := clientFor(t, &rest.Config{Host: up.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: up.Config.CAData}, BearerToken: cred.Token})
	if err := agentClient.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(cred.DeploymentNamespace)); err != nil {
		t.Errorf("the credential cannot list its own BundleDeployments: %v", err)
	}
	wantForbidden(t, "the credential listing another namespace", agentClient.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(workspace)))

	// The agent set the finalizer: the manager did not update the
	// registration to add its own (nor, then, an owner reference).
	granted := &fleet.ClusterRegistration{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(reg), granted); err != nil {
		t.Fatal(err)
	}
	if len(granted.OwnerReferences) != 0 || len(granted.Finalizers) != 1 {
		t.Errorf("registration metadata was updated: owners %v, finalizers %v", granted.OwnerReferences, granted.Finalizers)
	}

	// Nothing written for the hand-over.
	secretName := names.RegistrationSecretName(clientID, random)
	sysNS := fleet.DefaultSystemRegistrationNamespace
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: sysNS, Name: secretName}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("hand-over Secret: want none, got %v", err)
	}
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: sysNS, Name: secretName + "-creds"}, &rbacv1.Role{}); !apierrors.IsNotFound(err) {
		t.Errorf("read grant of a hand-over Secret: want none, got %v", err)
	}

	// Another token of the same workspace is refused; the owner may fetch
	// again (a lost watch) without waiting.
	if _, err := creds.Credential(ctx, contentapi.CredentialRequest{User: other, Namespace: workspace, Name: reg.Name}); !apierrors.IsForbidden(err) {
		t.Errorf("another token's account: want Forbidden, got %v", err)
	}
	if again, err := creds.Credential(ctx, contentapi.CredentialRequest{User: owner, Namespace: workspace, Name: reg.Name}); err != nil || again == nil || again.Token == "" {
		t.Errorf("fetching again: %v, %v", again, err)
	}

	// A refused registration: the watch ends with the manager's reason.
	bad := newRegistration("request-api-bad", fleet.ClusterRegistrationSpec{ClientID: "api-bad"})
	_, err = creds.Credential(wctx, contentapi.CredentialRequest{User: owner, Namespace: workspace, Name: bad.Name, Wait: true})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "clientRandom") {
		t.Errorf("refused registration: want Forbidden naming the missing clientRandom, got %v", err)
	}
	// Not granted and unknown: NotFound without waiting.
	if _, err := creds.Credential(ctx, contentapi.CredentialRequest{User: owner, Namespace: workspace, Name: "request-unknown"}); !apierrors.IsNotFound(err) {
		t.Errorf("unknown registration: want NotFound, got %v", err)
	}

	// Deleting the registration revokes the credentials handed out.
	if err := up.Client.Delete(ctx, reg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the handed-out credential is revoked", func() error {
		err := agentClient.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(cred.DeploymentNamespace))
		if apierrors.IsUnauthorized(err) {
			return nil
		}
		return fmt.Errorf("still accepted: %v", err)
	})
	eventually(t, "the registration is gone (the manager removed its finalizer)", func() error {
		err := up.Client.Get(ctx, client.ObjectKeyFromObject(reg), &fleet.ClusterRegistration{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
}

// TestMayHandOverCredentials: the manager offers the content API's agent
// features only when it may grant tokens `get` and `watch` on
// registrationcredentials and agents `update` on clusterstatuses (else the
// API server would refuse the rules in every token's and agent's Role).
func TestMayHandOverCredentials(t *testing.T) {
	ctx := context.Background()
	as := func(sa string) client.Client {
		cfg := rest.CopyConfig(up.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + workspace + ":" + sa}
		return clientFor(t, cfg)
	}
	grantTo := func(sa string, rules ...rbacv1.PolicyRule) {
		t.Helper()
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "handover-check-" + sa}, Rules: rules}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "handover-check-" + sa},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: workspace}}}
		for _, o := range []client.Object{role, binding} {
			if err := up.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	creds := func(verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{contentapi.Group}, Resources: []string{contentapi.CredentialResource}, Verbs: verbs}
	}
	checkIns := rbacv1.PolicyRule{APIGroups: []string{contentapi.Group}, Resources: []string{contentapi.ClusterStatusResource}, Verbs: []string{"update"}}
	grantTo("manager-with-all", creds("get", "watch"), checkIns)
	grantTo("manager-without-checkins", creds("get", "watch"))
	grantTo("manager-get-only", creds("get"), checkIns)
	for _, tc := range []struct {
		name string
		c    client.Client
		want bool
	}{
		{name: "cluster admin", c: up.Client, want: true},
		{name: "get, watch and update check-ins", c: as("manager-with-all"), want: true},
		{name: "credentials but no check-ins (an older chart)", c: as("manager-without-checkins")},
		{name: "get only", c: as("manager-get-only")},
		{name: "none", c: as("manager-without")},
	} {
		eventually(t, tc.name, func() error {
			got, err := registration.MayHandOverCredentials(ctx, tc.c)
			if err != nil {
				return err
			}
			if got != tc.want {
				return fmt.Errorf("MayHandOverCredentials = %v, want %v", got, tc.want)
			}
			return nil
		})
	}
}
