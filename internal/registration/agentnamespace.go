package registration

import (
	"cmp"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// ReasonAgentNamespaceChangeRefused is the reason of Imported=True (and of
// its Warning Event) while a Cluster's agent namespace differs from the
// one its agent was installed in: the agent keeps running there, and
// nothing is installed or removed (refuseAgentMove).
const ReasonAgentNamespaceChangeRefused = "AgentNamespaceChangeRefused"

// installedAgentNamespace is the downstream namespace the agent the
// manager installed for cluster runs in: status.agentDeployedNamespace,
// or, for an agent installed by a version that did not record it, the
// namespace that agent reports at check-in (status.agent.namespace).
// Empty when no installed agent is known: then nothing can be moved.
func installedAgentNamespace(cluster *fleet.Cluster) string {
	if ns := cluster.Status.AgentDeployedNamespace; ns != "" {
		return ns
	}
	if agentRecorded(cluster) {
		return cluster.Status.Agent.Namespace
	}
	return ""
}

// agentMoveRefused says whether the agent the manager installed for
// cluster (installedAgentNamespace) runs in another namespace than
// the one the Cluster names now. Moving it is refused: the agent signs the
// Helm release storage of what it deploys with a key of its namespace and
// refuses releases another agent wrote, so an agent in a new namespace
// could not manage any bundle the old one deployed, and removing the old
// one would leave them without an owner.
func (r *ClusterReconciler) agentMoveRefused(cluster *fleet.Cluster) bool {
	installed := installedAgentNamespace(cluster)
	return installed != "" && installed != r.agentNamespace(cluster)
}

// refuseAgentMove leaves the agent of cluster where it runs: Imported
// stays True with reason AgentNamespaceChangeRefused, and a Warning Event
// is recorded when that condition is new. Nothing is retried: an edit of
// the Cluster (setting the namespace back) starts the next look, and
// other changes of the agent wait until then.
func (r *ClusterReconciler) refuseAgentMove(ctx context.Context, cluster *fleet.Cluster) {
	deployed := installedAgentNamespace(cluster)
	msg := fmt.Sprintf("spec.agentNamespace names namespace %s, but the agent keeps running in namespace %s: "+
		"moving an installed agent is not supported (the releases it deployed are signed by the agent of that namespace), "+
		"and the agent is not updated meanwhile; set spec.agentNamespace back to %s",
		r.agentNamespace(cluster), deployed, deployed)
	if r.setImported(cluster, metav1.ConditionTrue, ReasonAgentNamespaceChangeRefused, corev1.EventTypeWarning, msg) {
		ctrl.LoggerFrom(ctx).Info("agent namespace change refused", "agentDeployedNamespace", deployed, "agentNamespace", r.agentNamespace(cluster))
	}
}

// recordAgentNamespace completes the status of cluster whose agent is
// current: a cluster imported before status.agentDeployedNamespace was
// recorded gets it without being contacted, and one whose namespace
// change was refused, now set back, is Imported again. Called after
// agentMoveRefused said no, so the namespace the agent reports is the
// Cluster's; an agent that reported none yet runs there too, since its
// current hash covers the namespace it was installed in.
func (r *ClusterReconciler) recordAgentNamespace(cluster *fleet.Cluster) {
	if cluster.Status.AgentDeployedNamespace == "" {
		cluster.Status.AgentDeployedNamespace = cmp.Or(installedAgentNamespace(cluster), r.agentNamespace(cluster))
	}
	cond := meta.FindStatusCondition(cluster.Status.Conditions, fleet.ConditionImported)
	if cond != nil && cond.Reason == ReasonAgentNamespaceChangeRefused {
		setCond(&cluster.Status.Conditions, fleet.ConditionImported, metav1.ConditionTrue, ReasonImported, "agent installed", cluster.Generation)
	}
}
