package registration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
)

// agentStopRecheck is how often a removal waiting for the agent's pods to
// stop looks again: nothing watches them. agentHeldRecheck is how often a
// removal held by what the manager does not delete (agentRunning,
// agentStuck) looks again, to finish once it is gone.
const (
	agentStopRecheck = 5 * time.Second
	agentHeldRecheck = time.Minute
)

// Reasons of the removal of the agent the manager installed, which only
// Options.LocalAgentDisabled asks for (disableLocalAgent): an agent is
// never moved (refuseAgentMove).
const (
	// ReasonAgentRemoved (Normal Event): the agent the manager had
	// installed was removed.
	ReasonAgentRemoved = "AgentRemoved"
	// ReasonAgentRemovalFailed (Warning Event, and the reason of
	// Imported=False while it lasts): the agent could not be removed
	// yet; retried with backoff.
	ReasonAgentRemovalFailed = "AgentRemovalFailed"
)

// agentNamespaces are the downstream namespaces where an agent the
// manager installed for cluster may run: the one recorded in
// status.agentDeployedNamespace, configured (the Cluster's agent
// namespace now), and every namespace whose ConfigMap fleet-agent names
// the cluster's clientID (an agent installed before the namespace was
// recorded). Sorted.
func agentNamespaces(ctx context.Context, down client.Client, cluster *fleet.Cluster, configured string) []string {
	var out []string
	add := func(ns string) {
		if ns != "" && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	add(cluster.Status.AgentDeployedNamespace)
	add(configured)
	cms := &corev1.ConfigMapList{}
	if err := down.List(ctx, cms, client.MatchingFields{"metadata.name": agentConfigMapName}); err != nil {
		// The recorded namespace is what matters; the search only adds
		// agents installed before it was recorded.
		ctrl.LoggerFrom(ctx).Info("cannot search the fleet-agent ConfigMaps of the cluster; removing the recorded agent only", "error", err.Error())
	}
	for i := range cms.Items {
		if agentClientID(&cms.Items[i]) == cluster.Spec.ClientID {
			add(cms.Items[i].Namespace)
		}
	}
	slices.Sort(out)
	return out
}

// agentClientID is the clientID in an agent's ConfigMap fleet-agent, ""
// when it names none.
func agentClientID(cm *corev1.ConfigMap) string {
	var cfg AgentConfig
	if json.Unmarshal([]byte(cm.Data["config"]), &cfg) != nil {
		return ""
	}
	return cfg.ClientID
}

// removeAgentIn deletes from ns downstream the agent objects the manager
// made (madeByManager) for cluster, Deployment first so that the old
// agent stops before its configuration goes, and the ConfigMap last: it
// is what tells a retry whose agent this was. It leaves ns alone when its
// ConfigMap fleet-agent names another clientID: another Cluster's agent
// lives there now.
//
// The agent removed is the manager's own (mine) when that ConfigMap is
// the manager's; the credential goes before it, so that a removal
// interrupted in between finds the namespace again by its ConfigMap.
// Then what is left of the agent (agentLeftIn, counting from since, at
// now) decides the rest, which it returns:
//   - agentStopping: nothing but the Deployment is deleted yet;
//   - agentRunning: a Deployment fleet-agent the manager did not make
//     runs there, maybe with that configuration and credential: nothing
//     more is deleted, so that it keeps running;
//   - agentStuck: the rest goes, but for the credential, which a pod left
//     may still renew or store again, and the ConfigMap, which brings a
//     later pass back to finish once those pods are gone;
//   - agentGone: the rest goes, with the agent's credential
//     (agentCredentialOf), which nothing would look at after this.
//
// The namespace itself stays, and so does everything else the manager did
// not make, and the PriorityClass, which is one for the whole cluster.
// Upstream nothing changes: the old credential is revoked once an agent
// installed again registers.
func removeAgentIn(ctx context.Context, down client.Client, cluster *fleet.Cluster, ns string, since, now time.Time) (removed bool, left agentLeft, err error) {
	cm := &corev1.ConfigMap{}
	err = down.Get(ctx, client.ObjectKey{Namespace: ns, Name: agentConfigMapName}, cm)
	switch {
	case err == nil && agentClientID(cm) != cluster.Spec.ClientID:
		ctrl.LoggerFrom(ctx).Info("not removing the agent of another cluster", "namespace", ns)
		return false, agentGone, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, agentGone, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, agentConfigMapName, err)
	}
	found := err == nil
	mine := found && madeByManager(cm)
	objs := agentObjectsIn(ns)
	removed, err = deleteIf(ctx, down, objs[0], madeByManager)
	if err != nil {
		return removed, agentGone, err
	}
	keep := func(client.Object) bool { return false }
	credential, configMap := keep, madeByManager
	if mine {
		left, err = agentLeftIn(ctx, down, ns, since, now)
		switch {
		case err != nil:
			return removed, agentGone, err
		case left == agentStopping || left == agentRunning:
			return removed, left, nil
		case left == agentGone:
			credential = agentCredentialOf(cluster)
		case left == agentStuck:
			configMap = keep
		}
	}
	for _, obj := range objs[1:] {
		made, del := madeByManager, deleteIf
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			// Read once, above: the ConfigMap deleted is the one the
			// decisions were made on, and one made in its place since
			// stays (deleteMade's UID guard).
			if !found {
				continue
			}
			obj, made, del = cm, configMap, deleteMade
		case *corev1.ServiceAccount:
			// Applied with no field the API server tracks, so its
			// managedFields never name the manager: the ConfigMap
			// applied with it does.
			if mine {
				made = func(client.Object) bool { return true }
			}
		case *corev1.Secret:
			if o.Name == register.AgentSecretName {
				made = credential
			}
		}
		deleted, err := del(ctx, down, obj, made)
		if err != nil {
			return removed, agentGone, err
		}
		removed = removed || deleted
	}
	return removed, left, nil
}

// agentObjectsIn are the objects AgentObjects makes for an agent in ns,
// but for the namespace and the PriorityClass, in the order of their
// removal: the Deployment, the PodDisruptionBudget, the ServiceAccount,
// the bootstrap Secret, the agent's credential Secret, the ClusterRole and
// its binding named after ns, and the ConfigMap.
func agentObjectsIn(ns string) []client.Object {
	roleName := ns + "-fleet-agent-role"
	_, pdb := agentPruned(ns)
	return []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns}},
		pdb,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: bootstrapSecretName, Namespace: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: register.AgentSecretName, Namespace: ns}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: roleName + "-binding"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: roleName}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: agentConfigMapName, Namespace: ns}},
	}
}

// madeByManager says whether obj is one the manager applied: server-side
// applied by fieldOwner (its managedFields say so), or labelled
// AgentManagedByLabel.
func madeByManager(obj client.Object) bool {
	if obj.GetLabels()[AgentManagedByLabel] == AgentManagedByValue {
		return true
	}
	for _, f := range obj.GetManagedFields() {
		if f.Manager == string(fieldOwner) && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// agentCredentialOf says whether a Secret is the credential an agent of
// cluster stored when it registered (register.Store): the agent writes it
// with neither labels nor owner, so what identifies it is its name
// (checked by the caller), its kubeconfig, and the Cluster it names
// (workspace and name). A Secret of that name naming another Cluster, or
// none, is someone else's and stays.
func agentCredentialOf(cluster *fleet.Cluster) func(client.Object) bool {
	return func(obj client.Object) bool {
		s, ok := obj.(*corev1.Secret)
		if !ok || len(s.Data[register.KeyKubeconfig]) == 0 {
			return false
		}
		return string(s.Data[register.KeyClusterNamespace]) == cluster.Namespace &&
			string(s.Data[register.KeyClusterName]) == cluster.Name
	}
}

// deleteIf reads obj downstream and deletes it when made says the manager
// made it (deleteMade), and says whether it did; missing is fine.
func deleteIf(ctx context.Context, down client.Client, obj client.Object, made func(client.Object) bool) (bool, error) {
	if err := down.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if meta.IsNoMatchError(err) {
			return false, nil
		}
		return false, client.IgnoreNotFound(err)
	}
	return deleteMade(ctx, down, obj, made)
}

// deleteMade deletes obj, as read downstream, when made says the manager
// made it, and says whether it did; gone or replaced meanwhile is fine. The
// delete is conditional on the UID read, so that an object someone made in
// its place meanwhile stays, and a Deployment takes its pods with it.
func deleteMade(ctx context.Context, down client.Client, obj client.Object, made func(client.Object) bool) (bool, error) {
	if !made(obj) {
		return false, nil
	}
	uid := obj.GetUID()
	err := down.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or replaced since it was read (the UID precondition
		// failed): the replacement is not ours to delete.
		return false, nil
	case err != nil:
		return false, fmt.Errorf("deleting %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}

// agentRemoval is where the removal of the agents of a cluster stands:
// the namespace (ns) where one is left, and what of it (left); none when
// all are removed.
type agentRemoval struct {
	ns   string
	left agentLeft
}

// removeAgents removes every agent the manager installed for cluster
// downstream (agentNamespaces, with its agent namespace now), and clears
// status.agentDeployedNamespace once they are gone. While the pods of one
// are still stopping (removeAgentIn) it returns that namespace at once;
// one held by a running agent the manager did not make, or by pods stuck
// stopping, is returned once the other namespaces are done, and recorded
// in status.agentDeployedNamespace; every namespace keeps its ConfigMap
// until its removal is done, so that later passes find each again. A
// failure says so on the Cluster (Imported=False, reason
// AgentRemovalFailed, and a Warning Event when the message is new), and
// status.agentDeployedNamespace keeps naming a namespace still to be
// cleaned, so that the returned error's retry tries again.
func (r *ClusterReconciler) removeAgents(ctx context.Context, cluster *fleet.Cluster, down client.Client) (agentRemoval, error) {
	now := time.Now()
	held := agentRemoval{}
	uid := string(cluster.UID)
	for _, ns := range agentNamespaces(ctx, down, cluster, r.agentNamespace(cluster)) {
		removed, left, err := removeAgentIn(ctx, down, cluster, ns, stopSince(uid, ns, now), now)
		if left != agentStopping && left != agentStuck {
			stopSeenDone(uid, ns)
		}
		if err != nil {
			// Recorded, so that the retry finds it whatever else changes
			// (each namespace keeps its ConfigMap until the end anyway).
			cluster.Status.AgentDeployedNamespace = ns
			err = fmt.Errorf("removing the agent the manager installed in namespace %s: %w", ns, err)
			r.reportRemovalFailure(ctx, cluster, err)
			return agentRemoval{}, err
		}
		switch left {
		case agentStopping:
			cluster.Status.AgentDeployedNamespace = ns
			ctrl.LoggerFrom(ctx).Info("waiting for the pods of the agent installed before to stop", "namespace", ns)
			return agentRemoval{ns: ns, left: left}, nil
		case agentRunning, agentStuck:
			ctrl.LoggerFrom(ctx).Info("the removal of the agent installed before is held", "namespace", ns, "runningAgent", left == agentRunning)
			if held.ns == "" {
				held = agentRemoval{ns: ns, left: left}
			}
		}
		if removalDone(removed, left) {
			ctrl.LoggerFrom(ctx).Info("removed the agent installed before", "namespace", ns)
			r.event(cluster, corev1.EventTypeNormal, ReasonAgentRemoved, "Import", "removed the agent the manager had installed in namespace %s", ns)
		}
	}
	cluster.Status.AgentDeployedNamespace = held.ns
	return held, nil
}

// removalDone says whether a pass that deleted (removed) and left this in
// a namespace finished the removal of its agent there, which an
// AgentRemoved Event then tells: not while it is held or waits.
func removalDone(removed bool, left agentLeft) bool {
	return removed && left == agentGone
}

// reportRemovalFailure shows on cluster that its agent could not be
// removed.
func (r *ClusterReconciler) reportRemovalFailure(ctx context.Context, cluster *fleet.Cluster, err error) {
	msg := err.Error() + "; retrying"
	ctrl.LoggerFrom(ctx).Info("removing the agent failed, retrying with backoff", "error", err.Error())
	r.setImported(cluster, metav1.ConditionFalse, ReasonAgentRemovalFailed, corev1.EventTypeWarning, msg)
}

// event records an Event on cluster, when there is a recorder.
func (r *ClusterReconciler) event(cluster *fleet.Cluster, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(cluster, nil, typ, reason, action, note, args...)
	}
}
