package registration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/testenv"
)

// TestReimportBootstrapForgotten: installing an imported cluster's agent
// again (a redeployAgentGeneration bump) writes fleet-agent-bootstrap with
// a live registration token next to the credential the agent stored. The
// agent, started again, goes on with its credential (no new registration)
// and deletes the bootstrap Secret; the manager does not write it back:
// it installs the agent on a bump or a configuration change only, not
// because the Secret is gone.
func TestReimportBootstrapForgotten(t *testing.T) {
	ctx := context.Background()
	d := down[0]
	const agentNS, secretName = "agent-reimport", "reimport-kubeconfig"
	cluster, stop := importAndRegister(t, d, "reimport", secretName, agentNS)
	bootstrapKey := client.ObjectKey{Namespace: agentNS, Name: register.BootstrapSecretName}
	bootstrapGone := func() error {
		err := d.Client.Get(ctx, bootstrapKey, &corev1.Secret{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s still there: %v", register.BootstrapSecretName, err)
	}

	eventually(t, "the registration forgot the bootstrap secret", bootstrapGone)
	stop()
	requests := len(registrationsOf(t, cluster.Spec.ClientID))

	// Install the agent again: the bootstrap Secret is back, with a token.
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
		t.Fatal(err)
	}
	cluster.Spec.RedeployAgentGeneration = 1
	if err := up.Client.Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the agent installed again", func() error {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		if ptr.Deref(cluster.Status.AgentDeployedGeneration, -1) != 1 {
			return fmt.Errorf("agentDeployedGeneration %v", cluster.Status.AgentDeployedGeneration)
		}
		s := &corev1.Secret{}
		if err := d.Client.Get(ctx, bootstrapKey, s); err != nil {
			return err
		}
		if len(s.Data["token"]) == 0 {
			return fmt.Errorf("bootstrap secret without a token")
		}
		return nil
	})
	hash := cluster.Status.AgentConfigHash

	restarted := metav1.Now()
	startAgent(t, d, agentNS)
	eventually(t, "the restarted agent deleted the bootstrap secret", bootstrapGone)
	eventually(t, "the restarted agent checks in", func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		if c.Status.Agent.LastSeen.Before(&restarted) {
			return fmt.Errorf("lastSeen %v, before the restart at %v", c.Status.Agent.LastSeen, restarted)
		}
		return nil
	})
	if n := len(registrationsOf(t, cluster.Spec.ClientID)); n > requests {
		t.Errorf("the restarted agent registered again (%d registrations, %d before): its stored credential works", n, requests)
	}

	// The manager looks at the imported cluster every 2 s here
	// (KubeconfigRecheck): several looks, and the Secret stays deleted.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := bootstrapGone(); err != nil {
			t.Fatalf("the manager wrote the bootstrap secret again: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	c := &fleet.Cluster{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(c.Status.AgentDeployedGeneration, -1) != 1 || c.Status.AgentConfigHash != hash {
		t.Errorf("the agent was installed again without a reason: agentDeployedGeneration %v, agentConfigHash %q (was %q)",
			c.Status.AgentDeployedGeneration, c.Status.AgentConfigHash, hash)
	}
}

// TestReimportNewAPIServerMovesAgent: an imported cluster's agent has
// registered and stored its credential for the manager's URL. The user
// then gives the manager another address (apiServerURL in the kubeconfig
// Secret; here another name of the same API server, so that the agent can
// register there); the manager installs the agent again with a bootstrap
// Secret for it. The agent, started again, registers with that bootstrap
// Secret instead of deleting it unused: its stored credential points at
// the new URL, the bootstrap Secret is gone, and it checks in. Otherwise
// it would stay on the old address, with nothing to fall back on once
// that goes away.
func TestReimportNewAPIServerMovesAgent(t *testing.T) {
	ctx := context.Background()
	d := down[0]
	const agentNS, secretName = "agent-reimport-moved", "reimport-moved-kubeconfig"
	cluster, stop := importAndRegister(t, d, "reimport-moved", secretName, agentNS)
	if cfg, _ := agentConfig(t, d, agentNS); cfg.Host != up.Config.Host {
		t.Fatalf("credential stored for %s, want %s", cfg.Host, up.Config.Host)
	}
	stop()

	newURL := strings.Replace(up.Config.Host, "127.0.0.1", "localhost", 1)
	if newURL == up.Config.Host {
		t.Fatalf("API server URL %s has no 127.0.0.1 to rename", up.Config.Host)
	}
	s := &corev1.Secret{}
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: secretName}, s); err != nil {
		t.Fatal(err)
	}
	base := s.DeepCopy()
	s.Data["apiServerURL"], s.Data["apiServerCA"] = []byte(newURL), up.Config.CAData
	if err := up.Client.Patch(ctx, s, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the agent installed again for the new URL", func() error {
		b := &corev1.Secret{}
		if err := d.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: register.BootstrapSecretName}, b); err != nil {
			return err
		}
		if got := string(b.Data["apiServerURL"]); got != newURL {
			return fmt.Errorf("bootstrap apiServerURL %q, want %q", got, newURL)
		}
		return nil
	})

	restarted := metav1.Now()
	startAgent(t, d, agentNS)
	eventually(t, "the restarted agent registered for the new URL", func() error {
		if cfg, _ := agentConfig(t, d, agentNS); cfg.Host != newURL {
			return fmt.Errorf("credential stored for %s, want %s", cfg.Host, newURL)
		}
		err := d.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: register.BootstrapSecretName}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there: %v", register.BootstrapSecretName, err)
		}
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		if c.Status.Agent.LastSeen.Before(&restarted) {
			return fmt.Errorf("lastSeen %v, before the restart at %v", c.Status.Agent.LastSeen, restarted)
		}
		return nil
	})
}

// importAndRegister imports cluster name from the kubeconfig Secret
// secretName (created here for d), starts its agent in agentNS and waits
// until the agent registered; stop stops that agent.
func importAndRegister(t *testing.T, d *testenv.Cluster, name, secretName, agentNS string) (cluster *fleet.Cluster, stop func()) {
	t.Helper()
	createKubeconfigSecret(t, d, workspace, secretName)
	cluster = &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: secretName, AgentNamespace: agentNS}}
	if err := up.Client.Create(context.Background(), cluster); err != nil {
		t.Fatal(err)
	}
	waitImported(t, cluster)
	stop = startAgent(t, d, agentNS)
	waitRegistered(t, cluster.Spec.ClientID, workspace)
	return cluster, stop
}
