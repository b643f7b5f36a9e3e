package registration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
)

// secretWatchWorkspace holds the Cluster of TestImportedAgentFollowsSecretAtOnce.
// The shared manager sees it, but never rechecks its clusters' kubeconfig
// Secrets on its own (the others': every 2 s, agentconfig_secret_test.go),
// so that only the manager's watch of Secrets can explain that the agent
// followed a change of the Secret.
const secretWatchWorkspace = "ws-secret-watch"

func init() {
	*registration.KubeconfigRecheckOf = func(c *fleet.Cluster) time.Duration {
		if c.Namespace == secretWatchWorkspace {
			return 1000 * time.Hour
		}
		return *registration.KubeconfigRecheck
	}
}

// TestImportedAgentFollowsSecretAtOnce imports down[0] from a kubeconfig
// Secret in another namespace than the Cluster (spec.kubeConfigSecretNamespace,
// fleet-default), then changes, deletes and re-creates that Secret, each
// time touching nothing else. The manager notices each change at once,
// not at its periodic recheck (which never fires for this Cluster): a new
// apiServerURL reaches fleet-agent-bootstrap downstream and the Cluster's
// status, a deleted Secret turns Imported False (KubeconfigSecretMissing),
// and the re-created Secret's URL is installed. Before, Secrets were not
// watched and the first change waited for the 10-minute recheck.
func TestImportedAgentFollowsSecretAtOnce(t *testing.T) {
	ctx := context.Background()
	d := down[0]
	const agentNS, secretName = "agent-secret-watch", "secret-watch-kubeconfig"
	secretNS := fleet.DefaultWorkspace
	for _, ns := range []string{secretWatchWorkspace, secretNS} {
		if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	createKubeconfigSecret(t, d, secretNS, secretName)
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "secret-watch", Namespace: secretWatchWorkspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: secretName, KubeConfigSecretNamespace: secretNS, AgentNamespace: agentNS}}
	if err := up.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	waitImported(t, cluster)
	if got := bootstrapData(t, agentNS)["apiServerURL"]; got != up.Config.Host {
		t.Fatalf("apiServerURL downstream %q after the import, want the manager's %q", got, up.Config.Host)
	}

	// A URL that resolves nowhere: what the agent is told, not what the
	// manager uses to reach the downstream cluster.
	const newURL = "https://fleet.example.com:6443"
	key := client.ObjectKey{Namespace: secretNS, Name: secretName}
	s := &corev1.Secret{}
	if err := up.Client.Get(ctx, key, s); err != nil {
		t.Fatal(err)
	}
	base := s.DeepCopy()
	s.Data["apiServerURL"] = []byte(newURL)
	if err := up.Client.Patch(ctx, s, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	waitAgentURL(t, cluster, agentNS, newURL)

	// Deleted: the Cluster says so, instead of claiming an agent that
	// follows a Secret no longer there.
	if err := up.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Imported False for the deleted Secret", func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != registration.ReasonSecretMissing {
			return fmt.Errorf("Imported condition %+v", cond)
		}
		return nil
	})

	// Re-created with another URL: installed (the failed import's backoff
	// would get there too, later; the watch does at once).
	const thirdURL = "https://fleet-2.example.com:6443"
	createKubeconfigSecret(t, d, secretNS, secretName)
	s = &corev1.Secret{}
	if err := up.Client.Get(ctx, key, s); err != nil {
		t.Fatal(err)
	}
	base = s.DeepCopy()
	s.Data["apiServerURL"] = []byte(thirdURL)
	if err := up.Client.Patch(ctx, s, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	waitAgentURL(t, cluster, agentNS, thirdURL)
	waitImported(t, cluster)
}

// waitAgentURL waits until the agent downstream (fleet-agent-bootstrap in
// agentNS) and cluster's status both carry url.
func waitAgentURL(t *testing.T, cluster *fleet.Cluster, agentNS, url string) {
	t.Helper()
	eventually(t, "agent installed again with the Secret's URL "+url, func() error {
		if got := bootstrapData(t, agentNS)["apiServerURL"]; got != url {
			return fmt.Errorf("apiServerURL downstream %q", got)
		}
		c := &fleet.Cluster{}
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		if c.Status.APIServerURL != url {
			return fmt.Errorf("status apiServerURL %q", c.Status.APIServerURL)
		}
		return nil
	})
}
