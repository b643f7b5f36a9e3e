package registration

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// agentStopLimit is how long the removal of the manager's agent waits for
// its Deployment, ReplicaSets and pods to go once they are being deleted
// (a pod's wait starts when its grace period ends), or, for those not
// marked for deletion yet (the garbage collector has not reached them),
// since the removal first saw them (agentLeftIn's since). Past it the
// removal stops waiting: what holds them (a finalizer, a node gone) is not
// the manager's to lift, and the user is told.
const agentStopLimit = 10 * time.Minute

// agentLeft is what is left in a namespace of an agent whose Deployment
// the manager deleted.
type agentLeft int

const (
	// agentGone: no Deployment fleet-agent is left, and none of the
	// ReplicaSets it made or of their pods.
	agentGone agentLeft = iota
	// agentStopping: the Deployment is being deleted, or its ReplicaSets
	// or pods still are (the garbage collector deletes them after the
	// Deployment, and pods take their grace period to stop).
	agentStopping
	// agentRunning: a Deployment fleet-agent the manager did not make
	// runs there, which may use the agent's configuration and credential.
	agentRunning
	// agentStuck: all that is left of the agent has been being deleted for
	// longer than agentStopLimit.
	agentStuck
)

// agentLeftIn says what is left at now of the agent in ns: the Deployment
// fleet-agent, the ReplicaSets it controls (agentReplicaSet) and their
// pods (agentPod). Other workloads labelled app=fleet-agent do not count.
// With no kube-controller-manager (as in envtest) a Deployment has
// neither ReplicaSets nor pods, and the agent is gone once it is deleted.
// Objects not marked for deletion yet count as being deleted since the
// Deployment's deletion while it is held (a finalizer: the garbage
// collector then marks none of them), or else since since, when the
// removal first saw the agent stopping.
func agentLeftIn(ctx context.Context, down client.Client, ns string, since, now time.Time) (agentLeft, error) {
	var deleting []*metav1.Time
	dep := &appsv1.Deployment{}
	err := down.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleet-agent"}, dep)
	switch {
	case err == nil && dep.DeletionTimestamp.IsZero():
		return agentRunning, nil
	case err == nil:
		deleting = append(deleting, dep.DeletionTimestamp)
		since = dep.DeletionTimestamp.Time
	case !apierrors.IsNotFound(err):
		return 0, fmt.Errorf("reading Deployment %s/fleet-agent: %w", ns, err)
	}
	labels := client.MatchingLabels{"app": "fleet-agent"}
	sets := &appsv1.ReplicaSetList{}
	if err := down.List(ctx, sets, client.InNamespace(ns), labels); err != nil {
		return 0, fmt.Errorf("listing the agent's ReplicaSets in %s: %w", ns, err)
	}
	agentSets := map[string]bool{} // UID: whether the agent's
	for i := range sets.Items {
		rs := &sets.Items[i]
		agentSets[string(rs.UID)] = agentReplicaSet(rs)
		if agentSets[string(rs.UID)] {
			deleting = append(deleting, rs.DeletionTimestamp)
		}
	}
	pods := &corev1.PodList{}
	if err := down.List(ctx, pods, client.InNamespace(ns), labels); err != nil {
		return 0, fmt.Errorf("listing the agent's pods in %s: %w", ns, err)
	}
	for i := range pods.Items {
		if agentPod(&pods.Items[i], agentSets) {
			deleting = append(deleting, pods.Items[i].DeletionTimestamp)
		}
	}
	return stopState(deleting, since, now), nil
}

// agentReplicaSet says whether rs is one the Deployment fleet-agent of its
// namespace controls (its controller ownerReference).
func agentReplicaSet(rs *appsv1.ReplicaSet) bool {
	ref := metav1.GetControllerOf(rs)
	return ref != nil && ref.Kind == "Deployment" && ref.Name == "fleet-agent" && ref.APIVersion == appsv1.SchemeGroupVersion.String()
}

// agentPod says whether pod is one a ReplicaSet of the agent controls:
// sets (UID: whether it is the agent's) when that ReplicaSet is left, or,
// once it is gone, one the Deployment fleet-agent named
// fleet-agent-<pod-template-hash>, as Deployments name their ReplicaSets.
func agentPod(pod *corev1.Pod, sets map[string]bool) bool {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "ReplicaSet" || ref.APIVersion != appsv1.SchemeGroupVersion.String() {
		return false
	}
	if agent, ok := sets[string(ref.UID)]; ok {
		return agent
	}
	hash := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	return hash != "" && ref.Name == "fleet-agent-"+hash
}

// stopState is what is left of an agent whose objects still there have
// these deletion timestamps (nil: not marked yet, which counts from
// since): gone when none is left, stuck when all have been being deleted
// for longer than agentStopLimit at now, stopping otherwise.
func stopState(deleting []*metav1.Time, since, now time.Time) agentLeft {
	if len(deleting) == 0 {
		return agentGone
	}
	for _, t := range deleting {
		from := since
		if t != nil {
			from = t.Time
		}
		if now.Sub(from) < agentStopLimit {
			return agentStopping
		}
	}
	return agentStuck
}

// agentStopSeen records, per Cluster UID and namespace, when a removal
// first saw an agent stopping, so that objects the garbage collector never
// marks for deletion still end the wait after agentStopLimit. It is kept
// in memory only: a restarted manager starts the clock again, which at
// most delays the Warning by another agentStopLimit.
var agentStopSeen sync.Map

// stopSince is when the removal of the agent of cluster uid in ns first
// saw it stopping, now when this is the first time.
func stopSince(uid, ns string, now time.Time) time.Time {
	t, _ := agentStopSeen.LoadOrStore(uid+"/"+ns, now)
	return t.(time.Time)
}

// stopSeenDone forgets when the agent of cluster uid in ns was first seen
// stopping, once it no longer is.
func stopSeenDone(uid, ns string) {
	agentStopSeen.Delete(uid + "/" + ns)
}
