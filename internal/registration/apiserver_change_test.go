package registration_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestImportedAgentFollowsManagerAPIServer: a manager restarted with
// another apiServerURL and a rotated apiServerCA (the agents are to reach
// it elsewhere) installs them on the clusters it imported before, without
// a redeployAgentGeneration bump: fleet-agent-bootstrap downstream carries
// the new URL and CA, the Cluster reports the URL (and the CA hashed), and
// the import token's values, which users install agents from, carry them
// too. Before, the manager hashed the new URL/CA but installed the ones in
// the unexpired import token's values: every imported cluster got the old
// ones again, recorded the new hash, and was never corrected.
//
// Like TestImportedAgentFollowsManagerImage it runs its own managers, in
// imageWorkspace, which the shared manager does not see; they reconcile
// that test's Cluster too, which does not matter once it is over.
func TestImportedAgentFollowsManagerAPIServer(t *testing.T) {
	ctx := context.Background()
	d := down[0]
	const agentNS, secretName = "agent-follows-apiserver", "apiserver-kubeconfig"
	createKubeconfigSecret(t, d, imageWorkspace, secretName)
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "apiserver", Namespace: imageWorkspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: secretName, AgentNamespace: agentNS}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}

	stop := startWorkspaceManager(t, registration.Options{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData})
	waitImported(t, cluster)
	if got := bootstrapData(t, agentNS)["apiServerURL"]; got != up.Config.Host {
		t.Fatalf("apiServerURL downstream %q after the import, want %q", got, up.Config.Host)
	}
	firstHash := cluster.Status.AgentConfigHash
	stop()

	// A URL that resolves nowhere and another cluster's CA: what the
	// agents are told, not what the manager uses itself.
	const newURL = "https://fleet.example.com:6443"
	newCA := d.Config.CAData
	if len(newCA) == 0 || string(newCA) == string(up.Config.CAData) {
		t.Fatal("the test needs a CA other than the manager's")
	}
	startWorkspaceManager(t, registration.Options{APIServerURL: newURL, APIServerCA: newCA})

	waitAgentFollows(t, agentFollows{
		cluster: cluster, agentNS: agentNS, firstHash: firstHash,
		url: newURL, ca: newCA, source: "the manager",
	})
	eventually(t, "import token values carry the new URL and CA", func() error {
		s := &corev1.Secret{}
		key := client.ObjectKey{Namespace: imageWorkspace, Name: "import-token-" + cluster.Name}
		if err := up.Client.Get(ctx, key, s); err != nil {
			return err
		}
		var v registration.Values
		if err := yaml.Unmarshal(s.Data["values"], &v); err != nil {
			return err
		}
		if v.APIServerURL != newURL || v.APIServerCA != string(newCA) {
			return fmt.Errorf("values apiServerURL %q (CA new: %v)", v.APIServerURL, v.APIServerCA == string(newCA))
		}
		return nil
	})
}
