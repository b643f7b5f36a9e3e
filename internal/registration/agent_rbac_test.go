package registration_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/registration"
)

// registerWith registers clientID with the token whose values are v (as
// the agent does, without running one) and returns the credential handed
// over in the registration secret: a client config for its cluster
// namespace, and that namespace.
func registerWith(t *testing.T, v registration.Values, ws, tokenName, clientID string) (*rest.Config, string) {
	t.Helper()
	ctx := context.Background()
	reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: ws,
		Labels: map[string]string{fleet.RegistrationTokenLabel: tokenName}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: "r1", ClusterLabels: map[string]string{"env": "dev"}}}
	if err := clientFor(t, tokenConfig(v)).Create(ctx, reg); err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{}
	eventually(t, "registration secret", func() error {
		return up.Client.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemRegistrationNamespace,
			Name: names.RegistrationSecretName(clientID, "r1")}, s)
	})
	cfg := rest.CopyConfig(tokenConfig(v))
	cfg.BearerToken = string(s.Data["token"])
	return cfg, string(s.Data["deploymentNamespace"])
}

// TestAgentReadsSecretsByNameOnly: an agent credential may get a Secret or
// ConfigMap of its cluster namespace by name (values Secrets,
// downstreamResources), but not list or watch them: with that it would
// read every Secret there, whatever the BundleDeployments name.
func TestAgentReadsSecretsByNameOnly(t *testing.T) {
	ctx := context.Background()
	v := newToken(t, workspace, "rbac-token", time.Hour)
	cfg, ns := registerWith(t, v, workspace, "rbac-token", "rbac-agent")
	agentClient := clientFor(t, cfg)
	if err := up.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-values", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := up.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}

	eventually(t, "get a secret of its namespace by name", func() error {
		return agentClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app-values"}, &corev1.Secret{})
	})
	if err := agentClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app-config"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("get a configmap of its namespace by name: %v", err)
	}
	wantForbidden(t, "list the secrets of its namespace", agentClient.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)))
	wantForbidden(t, "list the configmaps of its namespace", agentClient.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)))
	wc, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &corev1.SecretList{}, client.InNamespace(ns))
	if err == nil {
		w.Stop()
	}
	wantForbidden(t, "watch the secrets of its namespace", err)
}
