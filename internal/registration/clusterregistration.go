package registration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/names"
)

const (
	registrationFinalizer = fleet.ClusterRegistrationFinalizer
	// ConditionGranted is the condition type on a ClusterRegistration.
	ConditionGranted = "Granted"

	ReasonGranted          = "Granted"
	ReasonDelivered        = "Delivered"
	ReasonInvalid          = "InvalidRequest"
	ReasonUnknownToken     = "UnknownToken"
	ReasonTokenExpired     = "TokenExpired"
	ReasonOtherWorkspace   = "ClusterInOtherWorkspace"
	ReasonNameConflict     = "ClusterNameConflict"
	ReasonWaitingNamespace = "WaitingForClusterNamespace"
)

// refusal is bad input: the registration is marked and not retried.
type refusal struct{ reason, msg string }

func (r *refusal) Error() string { return r.msg }

// RegistrationReconciler grants ClusterRegistrations: it finds or creates the
// Cluster of the clientID, creates the cluster's credential (contract 3) and
// hands it over: through the content API (Credentials) when the agent asked
// for that, else in the c-* Secret that only the registering token can read.
type RegistrationReconciler struct {
	reconcilerBase

	// readGranted records the registrations (by UID) whose read grant of
	// the hand-over Secret this process has written ahead of the grant, so
	// that the grant itself does not write it again. Lost on a restart,
	// after which the grant writes it once more (create or apply).
	readGranted sync.Map
	// handedOver records, per registration (by UID) not yet marked
	// granted, the hand-over Secret this process wrote (see handOver), so
	// that a retried grant neither writes a second token nor writes a new
	// Secret once the agent took its credential.
	handedOver sync.Map
}

// SetupWithManager registers the controller; a Cluster change (its
// namespace appears, its agent checks in for the first time) wakes the
// registrations of its clientID that wait for it, so that later heartbeats
// cost nothing.
func (r *RegistrationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("cluster-registration").
		// Status and metadata updates (our own) need no reconcile; waits are
		// RequeueAfter or the Cluster watch.
		Watches(&fleet.ClusterRegistration{}, newFirst, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, deleting))).
		Watches(&fleet.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.registrationsOfCluster)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Opts.Workers, RateLimiter: rateLimiter()}).
		Complete(r)
}

// NewRegistrationPriority is the queue priority of a registration the
// manager has not seen before (the default is 0). Its first pass is cheap
// (the Cluster, the read grant of its hand-over Secret) and lets its agent
// stop polling, so in a sustained stream of registrations it goes ahead of
// the credential writes of earlier ones, which follow at the default
// priority. A refused check costs the API server more the more
// registrations wait: RBAC evaluates every read grant of the token.
const NewRegistrationPriority = 10

// newFirstHandler enqueues a new ClusterRegistration (not one of the
// informer's initial list) with NewRegistrationPriority, and every other
// event as controller-runtime's EnqueueRequestForObject does.
type newFirstHandler struct {
	handler.EnqueueRequestForObject
}

var newFirst = &newFirstHandler{}

func (h *newFirstHandler) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok && e.Object != nil && !e.IsInInitialList {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(NewRegistrationPriority)},
			reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
		return
	}
	h.EnqueueRequestForObject.Create(ctx, e, q)
}

func (r *RegistrationReconciler) registrationsOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	c := o.(*fleet.Cluster)
	if c.Spec.ClientID == "" {
		return nil
	}
	var list fleet.ClusterRegistrationList
	if err := r.Client.List(ctx, &list, client.MatchingFields{registrationClientIDIndex: c.Spec.ClientID}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if reg := &list.Items[i]; wakeOnCluster(reg, c) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(reg)})
		}
	}
	return out
}

// wakeOnCluster says whether a change of cluster c concerns reg: before
// the grant, reg may wait for c's namespace; after it, the first check-in
// after the grant means the agent stored its credential and gave the
// hand-over Secret back, so the clean-up can run. Once that is done,
// heartbeats cost no reconcile.
func wakeOnCluster(reg *fleet.ClusterRegistration, c *fleet.Cluster) bool {
	if !reg.DeletionTimestamp.IsZero() || delivered(reg) {
		return false
	}
	if !reg.Status.Granted {
		return true
	}
	cond := meta.FindStatusCondition(reg.Status.Conditions, ConditionGranted)
	seen := c.Status.Agent.LastSeen
	return !seen.IsZero() && (cond == nil || !seen.Before(&cond.LastTransitionTime))
}

// namespaceWaitShown is how long a registration waits for its cluster's
// namespace before it says so in its status.
const namespaceWaitShown = 30 * time.Second

// delivered reports whether reg is done: granted, and its hand-over Secret
// and the read grant of it are gone.
func delivered(reg *fleet.ClusterRegistration) bool {
	c := meta.FindStatusCondition(reg.Status.Conditions, ConditionGranted)
	return reg.Status.Granted && c != nil && c.Reason == ReasonDelivered
}

// RequestSAName is the ServiceAccount of the credential a registration gets.
func RequestSAName(reg *fleet.ClusterRegistration) string {
	return names.SafeConcatName(reg.Name, string(reg.UID))
}

func (r *RegistrationReconciler) grantOf(reg *fleet.ClusterRegistration, cluster string) grant {
	statusAPI := r.Opts.Credentials != nil // the content API's agent features are on
	return grant{SA: RequestSAName(reg), Registration: reg.Name, Workspace: reg.Namespace, Cluster: cluster,
		ClusterNamespace: names.ClusterNamespace(reg.Namespace, cluster), ContentRBAC: r.Opts.ContentRBAC,
		StatusAPI:        statusAPI,
		NoWorkspaceGrant: statusAPI && reg.Annotations[contentapi.ClusterStatusAnnotation] == contentapi.ClusterStatusContentAPI}
}

// Reconcile implements reconcile.Reconciler.
func (r *RegistrationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	reg := &fleet.ClusterRegistration{}
	if err := r.Client.Get(ctx, req.NamespacedName, reg); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !reg.DeletionTimestamp.IsZero() {
		r.readGranted.Delete(reg.UID)
		r.handedOver.Delete(reg.UID)
		if err := r.revoke(ctx, reg); err != nil {
			return ctrl.Result{}, err
		}
		if controllerutil.RemoveFinalizer(reg, registrationFinalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, reg))
		}
		return ctrl.Result{}, nil
	}
	if reg.Labels[fleet.ClusterManagementLabel] != "" {
		return ctrl.Result{}, nil
	}
	if reg.Status.Granted {
		// The grant is recorded. Should it run again (its status lost),
		// handOver judges the Secret it finds without this record.
		r.handedOver.Delete(reg.UID)
		return r.afterGrant(ctx, reg)
	}
	old := reg.DeepCopy()
	res, err := r.grant(ctx, reg)
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		r.readGranted.Delete(reg.UID)
		r.handedOver.Delete(reg.UID)
		log.Info("refusing cluster registration", "reason", ref.reason, "message", ref.msg, "clientID", reg.Spec.ClientID)
		setCond(&reg.Status.Conditions, ConditionGranted, metav1.ConditionFalse, ref.reason, ref.msg, reg.Generation)
		err = nil
	case err != nil:
		setCond(&reg.Status.Conditions, ConditionGranted, metav1.ConditionFalse, "Error", err.Error(), reg.Generation)
	}
	if equality.Semantic.DeepEqual(old.Status, reg.Status) {
		return res, err
	}
	// grant may have updated the metadata (finalizer, owner): the patch
	// carries the status only.
	base := reg.DeepCopy()
	base.Status = old.Status
	if perr := r.Client.Status().Patch(ctx, reg, client.MergeFrom(base)); perr != nil && !apierrors.IsNotFound(perr) {
		return ctrl.Result{}, errors.Join(err, perr)
	}
	return res, err
}

// grant runs the steps of granting reg; a *refusal is bad input. It is
// written for registration bursts (a fleet of clusters booting at once):
// it never waits for another controller, and it issues the independent
// writes of the credential concurrently, so one registration costs about
// four round trips to the API server instead of a dozen in a row.
func (r *RegistrationReconciler) grant(ctx context.Context, reg *fleet.ClusterRegistration) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if reg.Spec.ClientID == "" || reg.Spec.ClientRandom == "" {
		return ctrl.Result{}, &refusal{ReasonInvalid, "spec.clientID and spec.clientRandom are required"}
	}
	tokenName := reg.Labels[fleet.RegistrationTokenLabel]
	tok := &fleet.ClusterRegistrationToken{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: reg.Namespace, Name: tokenName}, tok); err != nil {
		if apierrors.IsNotFound(err) || tokenName == "" {
			return ctrl.Result{}, &refusal{ReasonUnknownToken, fmt.Sprintf("registration token %q does not exist in namespace %s", tokenName, reg.Namespace)}
		}
		return ctrl.Result{}, err
	}
	exp := tokenExpiry(tok)
	if !tok.DeletionTimestamp.IsZero() || exp != nil && !time.Now().Before(exp.Time) {
		return ctrl.Result{}, &refusal{ReasonTokenExpired, fmt.Sprintf("registration token %q has expired", tokenName)}
	}
	if exp == nil && r.Opts.RegistrationTokenTTLRequired {
		// The token controller deletes it; until then it grants nothing.
		return ctrl.Result{}, &refusal{ReasonTTLRequired, fmt.Sprintf("registration token %q has no TTL, and the manager requires one", tokenName)}
	}

	cluster, err := r.findOrCreateCluster(ctx, reg)
	if err != nil {
		return ctrl.Result{}, err
	}
	if msg := clusterNameProblem(cluster.Name); msg != "" {
		// Its credential could not be labelled with its name (nor could
		// anything be deployed to it): refused, not retried.
		return ctrl.Result{}, &refusal{ReasonInvalidName, msg}
	}

	// One metadata update before any credential object exists: the
	// finalizer (deleting the registration revokes what it was granted)
	// and the owner (an API server's garbage collector deletes the
	// registrations of a deleted Cluster; the Cluster's own clean-up does
	// too, see cleanupCluster). None when the agent set the finalizer
	// itself (ours does, with the content API hand-over): the owner alone
	// is not worth a write per registration.
	if controllerutil.AddFinalizer(reg, registrationFinalizer) {
		if !metav1.IsControlledBy(reg, cluster) && len(reg.OwnerReferences) == 0 {
			_ = controllerutil.SetOwnerReference(cluster, reg, r.Client.Scheme())
		}
		if err := r.Client.Update(ctx, reg); err != nil {
			if apierrors.IsConflict(err) {
				// The cache was behind; nothing is granted yet.
				return ctrl.Result{RequeueAfter: jitter(time.Second)}, nil
			}
			return ctrl.Result{}, err
		}
	}

	secretName := names.RegistrationSecretName(reg.Spec.ClientID, reg.Spec.ClientRandom)
	labels := map[string]string{
		fleet.ManagedLabel: "true", fleet.ClusterLabel: cluster.Name, fleet.ClusterRegistrationNS: reg.Namespace,
		labelCredentialOf: reg.Name, labelTokenOf: tok.Name, labelTokenNamespace: tok.Namespace,
	}
	role, binding := credsAccess(r.Opts.SystemRegistrationNamespace, secretName, TokenSAName(tok), tok.Namespace, labels)
	// Through the content API the agent needs no read grant, and no Secret.
	viaAPI := r.Opts.Credentials.enabledFor(reg)
	_, readGranted := r.readGranted.Load(reg.UID)
	needReadGrant := !viaAPI && !readGranted

	// The Cluster controller creates the cluster namespace (contract 1);
	// the Cluster's status change wakes this registration up. A short wait
	// writes no condition, so that a registration costs one status write;
	// a long one is shown.
	if cluster.Status.Namespace == "" {
		// The read grant of the hand-over Secret comes first, ahead of the
		// credential: with it the agent stops polling (a 403 each time)
		// and watches for its Secret by name, which costs the API server
		// nothing while a burst of registrations queues here.
		if needReadGrant {
			if err := ensureAll(ctx, r.Client, []client.Object{role, binding}); err != nil {
				return ctrl.Result{}, err
			}
			r.readGranted.Store(reg.UID, struct{}{})
		}
		if time.Since(cluster.CreationTimestamp.Time) > namespaceWaitShown {
			setCond(&reg.Status.Conditions, ConditionGranted, metav1.ConditionFalse, ReasonWaitingNamespace, "waiting for the namespace of cluster "+cluster.Name, reg.Generation)
		}
		// The credential, next, waits its turn (see NewRegistrationPriority).
		return ctrl.Result{RequeueAfter: jitter(5 * time.Second), Priority: ptr.To(0)}, nil
	}

	// The ServiceAccount, its RBAC and (unless written ahead) the read
	// grant of the hand-over Secret do not depend on each other: they are
	// written together, and before the Secret, so that the agent waiting
	// for the Secret can read it, and use the credential in it, as soon as
	// it exists.
	g := r.grantOf(reg, cluster.Name)
	objs := g.objects()
	if needReadGrant {
		objs = append(objs, role, binding)
	}
	if err := ensureAll(ctx, r.Client, objs); err != nil {
		return ctrl.Result{}, err
	}
	if !viaAPI {
		if err := r.handOver(ctx, reg, g, secretName, labels); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.deleteOlder(ctx, reg); err != nil {
		return ctrl.Result{}, err
	}
	r.readGranted.Delete(reg.UID)
	reg.Status.Granted = true
	reg.Status.ClusterName = cluster.Name
	setCond(&reg.Status.Conditions, ConditionGranted, metav1.ConditionTrue, ReasonGranted, "credential issued for cluster "+cluster.Name, reg.Generation)
	log.Info("granted cluster registration", "cluster", cluster.Name, "clusterNamespace", g.ClusterNamespace, "handover", handoverOf(viaAPI))
	if viaAPI {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: jitter(r.Opts.DeliveryCheck)}, nil
}

func handoverOf(viaAPI bool) string {
	if viaAPI {
		return "content API"
	}
	return "Secret"
}

// findOrCreateCluster returns the Cluster of reg's clientID in reg's
// namespace, creating it (with the registration's labels, unless
// IgnoreClusterRegistrationLabels) when there is none. A clientID that
// belongs to a Cluster in another workspace is refused.
func (r *RegistrationReconciler) findOrCreateCluster(ctx context.Context, reg *fleet.ClusterRegistration) (*fleet.Cluster, error) {
	var list fleet.ClusterList
	if err := r.Client.List(ctx, &list, client.MatchingFields{clusterClientIDIndex: reg.Spec.ClientID}); err != nil {
		return nil, err
	}
	var other, deleted string
	var found *fleet.Cluster
	for i := range list.Items {
		c := &list.Items[i]
		switch {
		case c.Namespace != reg.Namespace:
			other = c.Namespace
		case !c.DeletionTimestamp.IsZero():
			// Its clean-up deletes this registration too.
			deleted = c.Name
		case found == nil || c.CreationTimestamp.Before(&found.CreationTimestamp):
			found = c
		}
	}
	if found != nil {
		return found, nil
	}
	if deleted != "" {
		return nil, fmt.Errorf("cluster %s is being deleted", deleted)
	}
	if other != "" {
		return nil, &refusal{ReasonOtherWorkspace, fmt.Sprintf("clientID is already used by a cluster in namespace %s; a cluster cannot move between workspaces by registering", other)}
	}
	name := names.ClusterNameForClientID(reg.Spec.ClientID)
	labels := map[string]string{}
	if !r.Opts.IgnoreClusterRegistrationLabels {
		labels = ClusterLabels(reg.Spec.ClusterLabels)
	}
	c := &fleet.Cluster{
		// With the Cluster controller's finalizer already in place, that
		// controller need not update the new Cluster before its work.
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: reg.Namespace, Labels: labels,
			Finalizers: []string{clusterFinalizer}},
		Spec: fleet.ClusterSpec{ClientID: reg.Spec.ClientID},
	}
	c.Labels[fleet.ClusterLabel] = name
	if err := r.Client.Create(ctx, c); err != nil {
		if apierrors.IsAlreadyExists(err) {
			existing := &fleet.Cluster{}
			if gerr := r.Reader.Get(ctx, client.ObjectKeyFromObject(c), existing); gerr == nil && existing.Spec.ClientID == reg.Spec.ClientID {
				return existing, nil
			}
			return nil, &refusal{ReasonNameConflict, fmt.Sprintf("cluster %s exists with a different clientID", name)}
		}
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("created cluster for registration", "cluster", name)
	return c, nil
}

// ClusterLabels are the labels a registering agent may set on a new
// Cluster: everything but the reserved fleet.cattle.io/ (except
// created-by-agent-pod) and management.cattle.io/ prefixes.
func ClusterLabels(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		if k != fleet.CreatedByAgentPodLabel && (strings.HasPrefix(k, fleet.LabelPrefix) || strings.HasPrefix(k, "management.cattle.io/")) {
			continue
		}
		out[k] = v
	}
	return out
}

// deleteOlder deletes the other registrations of the same clientID in the
// namespace; their finalizers revoke their credentials.
func (r *RegistrationReconciler) deleteOlder(ctx context.Context, reg *fleet.ClusterRegistration) error {
	var list fleet.ClusterRegistrationList
	if err := r.Client.List(ctx, &list, client.InNamespace(reg.Namespace), client.MatchingFields{registrationClientIDIndex: reg.Spec.ClientID}); err != nil {
		return err
	}
	for i := range list.Items {
		o := &list.Items[i]
		if !supersedes(reg, o) {
			continue
		}
		if err := deleteIfExists(ctx, r.Client, o); err != nil {
			return err
		}
	}
	return nil
}

// supersedes says whether reg replaces o, another registration of its
// clientID: o is older. creationTimestamp has a resolution of one second,
// so two registrations of the same second are ordered by name: a total
// order, so that two registrations granted concurrently never delete each
// other (and so revoke both credentials).
func supersedes(reg, o *fleet.ClusterRegistration) bool {
	if o.UID == reg.UID {
		return false
	}
	if !reg.CreationTimestamp.Equal(&o.CreationTimestamp) {
		return o.CreationTimestamp.Before(&reg.CreationTimestamp)
	}
	return o.Name < reg.Name
}

// afterGrant runs at the agent's first check-in after the grant (or
// DeliveryCheck after it): it removes the read grant of the hand-over
// Secret when the agent has deleted that Secret (it does so after storing
// its credential), and both when the agent never came for it within
// RegistrationSecretTTL.
func (r *RegistrationReconciler) afterGrant(ctx context.Context, reg *fleet.ClusterRegistration) (ctrl.Result, error) {
	if delivered(reg) || r.Opts.Credentials.enabledFor(reg) {
		// Through the content API nothing was written for the hand-over.
		// (The API stops handing the credential out after
		// RegistrationSecretTTL by itself.)
		return ctrl.Result{}, nil
	}
	c := meta.FindStatusCondition(reg.Status.Conditions, ConditionGranted)
	grantedAt := reg.CreationTimestamp.Time
	if c != nil {
		grantedAt = c.LastTransitionTime.Time
	}
	name := names.RegistrationSecretName(reg.Spec.ClientID, reg.Spec.ClientRandom)
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: r.Opts.SystemRegistrationNamespace, Name: name}, &corev1.Secret{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ctrl.Result{}, err
	case time.Since(grantedAt) < r.Opts.RegistrationSecretTTL:
		return ctrl.Result{RequeueAfter: jitter(time.Until(grantedAt.Add(r.Opts.RegistrationSecretTTL)))}, nil
	}
	// When the agent already deleted the Secret, only its read grant is left.
	if err := r.deleteHandover(ctx, reg, err == nil); err != nil {
		return ctrl.Result{}, err
	}
	old := reg.DeepCopy()
	msg := "the registration secret is removed"
	if err == nil {
		msg = "the agent did not fetch its credential in time; " + msg
	}
	setCond(&reg.Status.Conditions, ConditionGranted, metav1.ConditionTrue, ReasonDelivered, msg, reg.Generation)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Status().Patch(ctx, reg, client.MergeFrom(old)))
}

// deleteHandover deletes the hand-over Secret of reg (when withSecret) and
// the Role and RoleBinding that let the import token read it.
func (r *RegistrationReconciler) deleteHandover(ctx context.Context, reg *fleet.ClusterRegistration, withSecret bool) error {
	if reg.Spec.ClientID == "" {
		return nil
	}
	name := names.RegistrationSecretName(reg.Spec.ClientID, reg.Spec.ClientRandom)
	ns := r.Opts.SystemRegistrationNamespace
	role, binding := credsAccess(ns, name, "", "", nil)
	if withSecret {
		// The Secret first: once it is gone, the grant reads nothing.
		if err := deleteIfExists(ctx, r.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
			return err
		}
	}
	return deleteAll(ctx, r.Client, []client.Object{binding, role})
}

// revoke deletes the credential of reg: its ServiceAccount (every token of
// it stops working at once), its RBAC and the hand-over Secret.
func (r *RegistrationReconciler) revoke(ctx context.Context, reg *fleet.ClusterRegistration) error {
	if err := r.deleteHandover(ctx, reg, true); err != nil {
		return err
	}
	clusters, err := r.grantedClusters(ctx, reg)
	if err != nil {
		return err
	}
	for _, cluster := range clusters {
		g := r.grantOf(reg, cluster)
		// Whatever mode made the credential, remove all of it.
		g.ContentRBAC, g.NoWorkspaceGrant = true, false
		for _, o := range g.objects() {
			if err := deleteIfExists(ctx, r.Client, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// grantedClusters are the Clusters reg may hold a credential for: the one
// its status names, or, when it is not marked granted, those of its
// clientID in its namespace. The grant writes the credential before it
// marks the registration; when that status write failed, the credential
// exists all the same.
func (r *RegistrationReconciler) grantedClusters(ctx context.Context, reg *fleet.ClusterRegistration) ([]string, error) {
	if reg.Status.ClusterName != "" {
		return []string{reg.Status.ClusterName}, nil
	}
	if reg.Spec.ClientID == "" {
		return nil, nil
	}
	var list fleet.ClusterList
	if err := r.Client.List(ctx, &list, client.InNamespace(reg.Namespace), client.MatchingFields{clusterClientIDIndex: reg.Spec.ClientID}); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(list.Items))
	for _, c := range list.Items {
		out = append(out, c.Name)
	}
	return out, nil
}

// setCond sets one condition, keeping LastTransitionTime when the status
// does not change.
func setCond(conds *[]metav1.Condition, typ string, status metav1.ConditionStatus, reason, msg string, gen int64) {
	meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
}
