package registration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestLocalRedeployAfterTokenExpiry: the local cluster's kubeconfig
// (Secret local-cluster) holds a token the manager requested at start-up,
// for 12 hours. Redeploying the local agent later (spec.
// redeployAgentGeneration) must not fail with 401 until the manager
// restarts: the import requests a new token when that one is gone. The
// passing of 12 hours is played by an invalid token and a past expiry.
func TestLocalRedeployAfterTokenExpiry(t *testing.T) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: fleet.BootstrapNamespace, Name: fleet.LocalClusterName}
	eventually(t, "local cluster imported", func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, key, c); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConditionImported) || c.Status.AgentDeployedGeneration == nil {
			return fmt.Errorf("local cluster status %+v", c.Status)
		}
		return nil
	})

	secret := &corev1.Secret{}
	secretKey := client.ObjectKey{Namespace: fleet.BootstrapNamespace, Name: "local-cluster"}
	if err := up.Client.Get(ctx, secretKey, secret); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(secret.Data["value"])
	if err != nil {
		t.Fatal(err)
	}
	const expired = "expired-token"
	for _, ai := range kc.AuthInfos {
		ai.Token = expired
	}
	if secret.Data["value"], err = clientcmd.Write(*kc); err != nil {
		t.Fatal(err)
	}
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	secret.Annotations["fleet.cattle.io/token-expiration"] = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if err := up.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}

	c := &fleet.Cluster{}
	if err := up.Client.Get(ctx, key, c); err != nil {
		t.Fatal(err)
	}
	c.Spec.RedeployAgentGeneration++
	want := c.Spec.RedeployAgentGeneration
	if err := up.Client.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	eventually(t, "local agent redeployed", func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, key, c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
		if c.Status.AgentDeployedGeneration == nil || *c.Status.AgentDeployedGeneration != want || cond == nil || cond.Status != "True" {
			return fmt.Errorf("deployed generation %v, want %d; imported %+v", c.Status.AgentDeployedGeneration, want, cond)
		}
		return nil
	})
	if err := up.Client.Get(ctx, secretKey, secret); err != nil {
		t.Fatal(err)
	}
	if kc, err = clientcmd.Load(secret.Data["value"]); err != nil {
		t.Fatal(err)
	}
	for name, ai := range kc.AuthInfos {
		if ai.Token == expired || ai.Token == "" {
			t.Errorf("user %s of the local kubeconfig has no new token", name)
		}
	}
}
