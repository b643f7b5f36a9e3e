package registration_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/registration"
)

// The managers of this package look at the kubeconfig Secrets of the
// clusters they imported every 2 s (10 minutes in production), so that
// TestImportedAgentFollowsKubeconfigSecret need not wait that long. It is
// set before TestMain starts them.
func init() { *registration.KubeconfigRecheck = 2 * time.Second }

// TestImportedAgentFollowsKubeconfigSecret imports down[0] from a
// kubeconfig Secret without apiServerURL/apiServerCA (the agent gets the
// manager's), then writes both into the Secret, as a user does who moves
// the manager behind another address. Nothing else changes (no
// redeployAgentGeneration bump, no Cluster edit), and the manager installs
// the agent again with the new URL and CA: fleet-agent-bootstrap
// downstream carries them, the Cluster reports them (the CA only hashed)
// and its agentConfigHash changed. Before, the hash left the Secret's
// values out and the agent kept the old URL until a redeploy bump.
func TestImportedAgentFollowsKubeconfigSecret(t *testing.T) {
	ctx := context.Background()
	d := down[0]
	const agentNS, secretName = "agent-follows-secret", "secret-follow-kubeconfig"
	createKubeconfigSecret(t, d, workspace, secretName)
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "secret-follow", Namespace: workspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: secretName, AgentNamespace: agentNS}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	waitImported(t, cluster)
	if got := bootstrapData(t, agentNS)["apiServerURL"]; got != up.Config.Host {
		t.Fatalf("apiServerURL downstream %q after the import, want the manager's %q", got, up.Config.Host)
	}
	firstHash := cluster.Status.AgentConfigHash

	// A URL that resolves nowhere and another cluster's CA: what the
	// agent is told, not what the manager uses to reach the downstream.
	const newURL = "https://fleet.example.com:6443"
	newCA := string(d.Config.CAData)
	if newCA == "" || newCA == string(up.Config.CAData) {
		t.Fatal("the test needs a CA other than the manager's")
	}
	s := &corev1.Secret{}
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: secretName}, s); err != nil {
		t.Fatal(err)
	}
	base := s.DeepCopy()
	s.Data["apiServerURL"], s.Data["apiServerCA"] = []byte(newURL), []byte(newCA)
	if err := up.Client.Patch(ctx, s, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}

	c := waitAgentFollows(t, agentFollows{
		cluster: cluster, agentNS: agentNS, firstHash: firstHash,
		url: newURL, ca: []byte(newCA), source: "the Secret",
	})
	// The CA is hashed into the status, never copied there.
	raw, err := json.Marshal(c.Status)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), strings.TrimSpace(newCA)[:40]) {
		t.Error("the Cluster's status holds the Secret's CA in clear")
	}
}

// bootstrapData is Secret fleet-agent-bootstrap in ns of down[0], as
// strings.
func bootstrapData(t *testing.T, ns string) map[string]string {
	t.Helper()
	s := &corev1.Secret{}
	if err := down[0].Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: register.BootstrapSecretName}, s); err != nil {
		t.Fatalf("bootstrap secret %s/%s downstream: %v", ns, register.BootstrapSecretName, err)
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out
}

// agentFollows is the change an imported cluster's agent is to follow: the
// manager installs it again on down[0] with url and ca.
type agentFollows struct {
	// cluster is the imported Cluster, agentNS its agent's namespace.
	cluster *fleet.Cluster
	agentNS string
	// firstHash is the Cluster's agentConfigHash before the change.
	firstHash string
	// url and ca are what the agent is to be told now.
	url string
	ca  []byte
	// source names where they come from, in failure messages.
	source string
}

// waitAgentFollows waits until the agent downstream is installed again with
// f's URL and CA and the Cluster reports them (the CA only hashed) with a
// new agentConfigHash, and fails the test if that took a
// redeployAgentGeneration bump. It returns the Cluster as last read.
func waitAgentFollows(t *testing.T, f agentFollows) *fleet.Cluster {
	t.Helper()
	eventually(t, "agent installed again with the URL and CA of "+f.source, func() error {
		data := bootstrapData(t, f.agentNS)
		if data["apiServerURL"] != f.url {
			return fmt.Errorf("apiServerURL downstream %q, want %q", data["apiServerURL"], f.url)
		}
		if data["apiServerCA"] != string(f.ca) {
			return fmt.Errorf("apiServerCA downstream is not the one of %s", f.source)
		}
		return nil
	})
	c := &fleet.Cluster{}
	sum := sha256.Sum224(f.ca)
	eventually(t, "cluster status follows "+f.source, func() error {
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(f.cluster), c); err != nil {
			return err
		}
		if c.Status.APIServerURL != f.url || c.Status.APIServerCAHash != hex.EncodeToString(sum[:]) {
			return fmt.Errorf("status apiServerURL %q, apiServerCAHash %q", c.Status.APIServerURL, c.Status.APIServerCAHash)
		}
		if c.Status.AgentConfigHash == f.firstHash {
			return fmt.Errorf("agentConfigHash unchanged")
		}
		return nil
	})
	if c.Spec.RedeployAgentGeneration != 0 || ptr.Deref(c.Status.AgentDeployedGeneration, -1) != 0 {
		t.Errorf("redeployAgentGeneration %d, agentDeployedGeneration %v: a change of %s needs no bump",
			c.Spec.RedeployAgentGeneration, c.Status.AgentDeployedGeneration, f.source)
	}
	return c
}
