package registration

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
)

// Reasons of Imported=False on Cluster "local" with
// Options.LocalAgentDisabled (and of its Events).
const (
	// ReasonLocalAgentDisabled: no agent is installed on the local
	// cluster; the one installed before was removed.
	ReasonLocalAgentDisabled = "LocalAgentDisabled"
	// ReasonLocalClusterMismatch: the kubeconfig Secret of Cluster
	// "local" reaches another cluster than the manager's own, whose agent
	// is then left alone.
	ReasonLocalClusterMismatch = "LocalClusterIdentityMismatch"
)

// localAgentDisabled says whether cluster is Cluster "local" of the
// bootstrap namespace while bootstrap.localAgentDisabled is set. Other
// Clusters named local, in other namespaces, are imported as usual.
func (r *ClusterReconciler) localAgentDisabled(cluster *fleet.Cluster) bool {
	ns := r.Opts.BootstrapNamespace
	return r.Opts.LocalAgentDisabled && ns != "" && cluster.Namespace == ns && cluster.Name == fleet.LocalClusterName
}

// agentRecorded says whether the status of cluster says that the manager
// installed its agent (now or before).
func agentRecorded(cluster *fleet.Cluster) bool {
	s := &cluster.Status
	return s.AgentDeployedNamespace != "" || s.AgentConfigHash != "" || s.AgentDeployedGeneration != nil ||
		meta.IsStatusConditionTrue(s.Conditions, fleet.ConditionImported)
}

// disableLocalAgent keeps the local cluster without an agent: none is
// installed, and the one the manager installed before is removed
// (removeAgents, which may have to wait for its pods to stop, or be held
// by what the manager does not delete: the Cluster is looked at again
// every agentStopRecheck, or agentHeldRecheck, meanwhile, and
// removalReport says why), but only when the kubeconfig Secret reaches the
// manager's own cluster: both kube-system namespaces have the same UID,
// as Rancher Fleet checks. The Cluster, its namespace
// and its BundleDeployments stay; Imported=False says why nothing is
// deployed, and an Event when that is new. Clearing the status of the
// install makes the manager install the agent again once the option is
// off.
func (r *ClusterReconciler) disableLocalAgent(ctx context.Context, cluster *fleet.Cluster) (ctrl.Result, error) {
	if !agentRecorded(cluster) {
		r.markLocalAgent(ctx, cluster, ReasonLocalAgentDisabled, corev1.EventTypeNormal,
			"bootstrap.localAgentDisabled is set: the manager installs no agent on the local cluster, and its bundles are not deployed")
		return ctrl.Result{}, nil
	}
	down, _, err := r.connect(ctx, cluster)
	if err != nil {
		r.reportRemovalFailure(ctx, cluster, fmt.Errorf("bootstrap.localAgentDisabled is set, but the local agent cannot be removed: %w", err))
		return ctrl.Result{}, err
	}
	same, err := r.managerCluster(ctx, down)
	if err != nil {
		r.reportRemovalFailure(ctx, cluster, err)
		return ctrl.Result{}, err
	}
	if !same {
		// Nothing is retried: a change of the Secret wakes the Cluster.
		r.markLocalAgent(ctx, cluster, ReasonLocalClusterMismatch, corev1.EventTypeWarning,
			"bootstrap.localAgentDisabled is set, but the kubeconfig Secret of this Cluster reaches a cluster whose kube-system namespace is not the management cluster's: its agent is left alone")
		return ctrl.Result{}, nil
	}
	state, err := r.removeAgents(ctx, cluster, down)
	if err != nil {
		return ctrl.Result{}, err
	}
	if state.ns == "" {
		cluster.Status.AgentConfigHash = ""
		cluster.Status.AgentDeployedGeneration = nil
	}
	typ, msg, recheck := removalReport(state)
	r.markLocalAgent(ctx, cluster, ReasonLocalAgentDisabled, typ, msg)
	if recheck > 0 {
		return ctrl.Result{RequeueAfter: jitter(recheck)}, nil
	}
	return ctrl.Result{}, nil
}

// removalReport is what Imported=False on Cluster local says (the message
// and the type of its Event) with the removal of its agent at state, and
// how soon to look again (0: no need to).
func removalReport(state agentRemoval) (typ, msg string, recheck time.Duration) {
	const off = "bootstrap.localAgentDisabled is set: the manager installs no agent on the local cluster"
	const rest = "; its bundles are not deployed"
	switch state.left {
	case agentStopping:
		return corev1.EventTypeNormal, fmt.Sprintf("%s, and is removing the one it had installed in namespace %s, whose pods are still stopping%s",
			off, state.ns, rest), agentStopRecheck
	case agentRunning:
		return corev1.EventTypeWarning, fmt.Sprintf("%s, but left the one it had installed in namespace %s in place: a Deployment fleet-agent the manager did not make runs there, maybe with that agent's configuration and credential; the removal goes on once that Deployment is gone%s",
			off, state.ns, rest), agentHeldRecheck
	case agentStuck:
		return corev1.EventTypeWarning, fmt.Sprintf("%s, and is removing the one it had installed in namespace %s, but pods of that agent have been stopping for more than %s: its ConfigMap fleet-agent stays, and so does any credential it stored (Secret %s naming this Cluster), until they are gone%s",
			off, state.ns, agentStopLimit, register.AgentSecretName, rest), agentHeldRecheck
	}
	return corev1.EventTypeNormal, off + ", and removed the one it had installed" + rest, 0
}

// managerCluster says whether down is the manager's own cluster: its
// kube-system namespace has the UID of the manager's.
func (r *ClusterReconciler) managerCluster(ctx context.Context, down client.Client) (bool, error) {
	own, theirs := &corev1.Namespace{}, &corev1.Namespace{}
	key := client.ObjectKey{Name: metav1.NamespaceSystem}
	if err := r.Reader.Get(ctx, key, own); err != nil {
		return false, fmt.Errorf("reading the management cluster's kube-system namespace: %w", err)
	}
	if err := down.Get(ctx, key, theirs); err != nil {
		return false, fmt.Errorf("reading the kube-system namespace the local kubeconfig reaches: %w", err)
	}
	return own.UID != "" && own.UID == theirs.UID, nil
}

// markLocalAgent sets Imported=False with reason and msg on cluster, and
// records an Event of typ when the condition is new.
func (r *ClusterReconciler) markLocalAgent(ctx context.Context, cluster *fleet.Cluster, reason, typ, msg string) {
	if r.setImported(cluster, metav1.ConditionFalse, reason, typ, msg) {
		ctrl.LoggerFrom(ctx).Info("local agent disabled", "reason", reason)
	}
}
