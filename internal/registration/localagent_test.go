package registration_test

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
)

// localOffNamespace is the bootstrap namespace of the managers
// TestLocalAgentDisabled starts itself; the shared manager does not see
// it.
const localOffNamespace = "local-off"

// TestLocalAgentDisabled restarts a manager of its own bootstrap
// namespace with and without LocalAgentDisabled (what a helm upgrade with
// bootstrap.localAgentDisabled does), its Cluster "local" importing the
// management cluster (up) into namespace localOffAgentNS:
//   - disabled from the start, no agent is installed; the Cluster stays,
//     with Imported=False and an Event saying why;
//   - enabled, the agent is installed; disabled again, the objects the
//     manager made are removed from up, the rest of the namespace stays,
//     and another imported Cluster of the namespace keeps its agent;
//   - Cluster "local" pointed at another cluster (down[0]), whose
//     kube-system UID is not the management cluster's: its agent is left
//     alone, and the Cluster says so.
func TestLocalAgentDisabled(t *testing.T) {
	ctx := context.Background()
	const agentNS = "local-off-agent"
	createKubeconfigSecret(t, down[0], localOffNamespace, "elsewhere-kubeconfig")
	createKubeconfigSecret(t, down[0], localOffNamespace, "other-kubeconfig")
	local := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: fleet.LocalClusterName, Namespace: localOffNamespace, Labels: map[string]string{"name": "local"}},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "local-cluster", AgentNamespace: agentNS}}
	other := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: localOffNamespace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "other-kubeconfig", AgentNamespace: "local-off-other"}}
	for _, c := range []*fleet.Cluster{local, other} {
		if err := up.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	withLocalAgent := func(disabled bool) (stop func()) {
		return startLocalOffManager(t, registration.Options{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData,
			BootstrapNamespace: localOffNamespace, LocalAgentDisabled: disabled})
	}

	stop := withLocalAgent(true)
	waitLocalAgentOff(t, local, registration.ReasonLocalAgentDisabled)
	waitImported(t, other)
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: "fleet-agent"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("local agent with localAgentDisabled: want none, got %v", err)
	}
	waitEvent(t, up, localOffNamespace, registration.ReasonLocalAgentDisabled, "installs no agent")
	stop()

	stop = withLocalAgent(false)
	waitImported(t, local)
	agentDeployment(t, up, agentNS)
	stop()
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keep-me", Namespace: agentNS}}
	if err := up.Client.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}

	stop = withLocalAgent(true)
	eventually(t, "local agent removed", func() error {
		err := up.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: "fleet-agent"}, &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("local agent deployment: %v", err)
		}
		return nil
	})
	c := waitLocalAgentOff(t, local, registration.ReasonLocalAgentDisabled)
	if c.Status.AgentDeployedNamespace != "" || c.Status.AgentConfigHash != "" || c.Status.AgentDeployedGeneration != nil || c.Status.Namespace == "" {
		t.Errorf("status after the removal: agentDeployedNamespace %q, agentConfigHash %q, agentDeployedGeneration %v, namespace %q",
			c.Status.AgentDeployedNamespace, c.Status.AgentConfigHash, c.Status.AgentDeployedGeneration, c.Status.Namespace)
	}
	for _, o := range []client.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: agentNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: agentNS}}} {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("local agent's %T %s: want it deleted, got %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	for _, o := range []client.Object{mine, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}}} {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("%T %s the manager did not make: %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	agentDeployment(t, down[0], "local-off-other")
	// The shared manager's local agent, another Cluster's, is untouched.
	agentDeployment(t, up, fleet.DefaultSystemNamespace)
	stop()

	editCluster(t, local, func(s *fleet.ClusterSpec) { s.KubeConfigSecret = "elsewhere-kubeconfig" })
	stop = withLocalAgent(false)
	waitImportedAt(t, local)
	agentDeployment(t, down[0], agentNS)
	stop()

	withLocalAgent(true)
	waitLocalAgentOff(t, local, registration.ReasonLocalClusterMismatch)
	waitEvent(t, up, localOffNamespace, registration.ReasonLocalClusterMismatch, "kube-system")
	agentDeployment(t, down[0], agentNS)
}

// waitLocalAgentOff waits for Imported=False with reason on cluster and
// returns it.
func waitLocalAgentOff(t *testing.T, cluster *fleet.Cluster, reason string) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{}
	eventually(t, "Imported=False "+reason, func() error {
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reason {
			return fmt.Errorf("imported condition %+v", cond)
		}
		return nil
	})
	return c
}

// startLocalOffManager runs a manager for localOffNamespace only, with
// opts (2 workers); stop ends it and waits until it has stopped, and runs
// when the test ends.
func startLocalOffManager(t *testing.T, opts registration.Options) (stop func()) {
	t.Helper()
	opts.Workers = 2
	ctx, cancel := context.WithCancel(context.Background())
	done, err := startManager(ctx, opts, map[string]cache.Config{localOffNamespace: {}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}
