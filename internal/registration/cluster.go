package registration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/finalizer"
	"github.com/fleetgo/fleet/internal/names"
)

const clusterFinalizer = "fleet.cattle.io/cluster-credentials"

// ClusterReconciler gives every Cluster its namespace (status.namespace),
// imports clusters that name a kubeconfig Secret, and revokes a deleted
// Cluster's credentials.
type ClusterReconciler struct {
	reconcilerBase
}

// SetupWithManager registers the controller.
func (r *ClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	secret, onSecret, err := r.watchKubeconfigSecrets(mgr)
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("registration-cluster").
		// Only spec, label and deletion changes matter here, and a
		// rewritten status.namespace (the agent may patch its Cluster's
		// status: the manager puts its own value back); the agents'
		// heartbeats (status) must not cause a reconcile each.
		For(&fleet.Cluster{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{},
			predicate.LabelChangedPredicate{}, deleting, statusNamespaceChanged))).
		// An imported cluster's kubeconfig Secret (metadata only).
		WatchesMetadata(secret, onSecret).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Opts.Workers, RateLimiter: rateLimiter()}).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *ClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &fleet.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	deleting, err := finalizer.Handle(ctx, r.Client, cluster, clusterFinalizer, func(ctx context.Context) error {
		return r.cleanupCluster(ctx, cluster)
	})
	if errors.Is(err, errRegistrationsLeft) {
		return ctrl.Result{RequeueAfter: jitter(time.Second)}, nil
	}
	if deleting || err != nil {
		return ctrl.Result{}, err
	}
	if msg := clusterNameProblem(cluster.Name); msg != "" {
		// Nothing can be deployed to it: no namespace, no import, no
		// retry (a name does not change).
		return ctrl.Result{}, r.refuseName(ctx, cluster, msg)
	}
	if cluster.Spec.KubeConfigSecret != "" && cluster.Spec.ClientID == "" {
		// The agent of an imported cluster presents this clientID; it is
		// random so that no other cluster can claim the Cluster.
		cluster.Spec.ClientID = randomString(32)
		return ctrl.Result{}, r.Client.Update(ctx, cluster)
	}

	old := cluster.DeepCopy()
	ns := names.ClusterNamespace(cluster.Namespace, cluster.Name)
	var (
		res ctrl.Result
		// rewritten is a status.namespace found that is not ns.
		rewritten string
	)
	err = r.ensureNamespace(ctx, cluster, ns)
	var conflict *namespaceConflict
	switch {
	case err == nil:
		if got := cluster.Status.Namespace; got != "" && got != ns {
			rewritten = got
		}
		cluster.Status.Namespace = ns
		setCond(&cluster.Status.Conditions, fleet.ConditionProcessed, metav1.ConditionTrue, "NamespaceCreated", "", cluster.Generation)
		if cluster.Spec.KubeConfigSecret != "" {
			res, err = r.importCluster(ctx, cluster)
		}
	case errors.As(err, &conflict):
		// Without status.namespace nothing is deployed to, or granted in,
		// the other cluster's namespace for this one.
		err = r.refuseNamespace(ctx, cluster, conflict)
		res = ctrl.Result{RequeueAfter: jitter(namespaceConflictRecheck)}
	default:
		setCond(&cluster.Status.Conditions, fleet.ConditionProcessed, metav1.ConditionFalse, "Error", err.Error(), cluster.Generation)
	}
	// Contract 2: other areas patch other parts of the status; the
	// optimistic lock makes a concurrent change a conflict (retried) instead
	// of a lost update of the conditions list.
	if equality.Semantic.DeepEqual(old.Status, cluster.Status) {
		return res, err
	}
	if perr := r.Client.Status().Patch(ctx, cluster, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); perr != nil {
		if apierrors.IsConflict(perr) && err == nil {
			return ctrl.Result{RequeueAfter: jitter(time.Second)}, nil
		}
		return ctrl.Result{}, errors.Join(err, perr)
	}
	// Only once the value is back: a conflict retried would say it twice.
	r.noteNamespaceRestored(ctx, cluster, rewritten, ns)
	return res, err
}

// deleting passes updates that start a deletion.
var deleting = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return !e.ObjectNew.GetDeletionTimestamp().IsZero()
}}

// statusNamespaceChanged passes updates that change status.namespace: the
// manager alone decides it, but the agent's credential may patch the
// status, and targeting must not be left with another value.
var statusNamespaceChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*fleet.Cluster)
	n, okN := e.ObjectNew.(*fleet.Cluster)
	return okO && okN && o.Status.Namespace != n.Status.Namespace
}}

// ReasonNamespaceRestored is the reason of the Warning Event of a Cluster
// whose status.namespace someone else rewrote (its agent's credential may
// patch the status) and the manager set back.
const ReasonNamespaceRestored = "NamespaceRestored"

// noteNamespaceRestored logs and records an Event once the manager has set
// cluster's status.namespace back to ns from got (written by someone
// else); nothing when got is empty.
func (r *ClusterReconciler) noteNamespaceRestored(ctx context.Context, cluster *fleet.Cluster, got, ns string) {
	if got == "" {
		return
	}
	ctrl.LoggerFrom(ctx).Info("restored the cluster namespace rewritten in its status", "namespace", ns, "found", got)
	if r.Recorder != nil {
		r.Recorder.Eventf(cluster, nil, corev1.EventTypeWarning, ReasonNamespaceRestored, "RestoreNamespace",
			"status.namespace was %.80q, not the cluster's namespace %s (written by something other than the manager, such as the agent's credential); set back", got, ns)
	}
}

// ReasonNamespaceConflict is the reason of a Cluster's Processed=False
// condition when its namespace belongs to another Cluster, or is not a
// Fleet cluster namespace.
const ReasonNamespaceConflict = "NamespaceConflict"

// namespaceConflictRecheck is how often a Cluster refused its namespace
// looks again (the other cluster may be deleted, and its namespace with it).
const namespaceConflictRecheck = 2 * time.Minute

// namespaceConflict means that a Cluster's namespace exists and is not its
// own: names.ClusterNamespace cuts long names to 57 characters and a
// 5-hex hash, so two Clusters may get the same name.
type namespaceConflict struct {
	ns string
	// owner is the workspace/name of the Cluster the namespace belongs to.
	owner string
}

func (e *namespaceConflict) Error() string {
	return fmt.Sprintf("namespace %s belongs to cluster %s (the names of both clusters shorten to the same namespace); rename this cluster", e.ns, e.owner)
}

// namespaceOwner is the workspace and name of the Cluster ns belongs to
// (its annotations); both empty when it names none.
func namespaceOwner(ns *corev1.Namespace) (workspace, name string) {
	return ns.Annotations[fleet.ClusterNamespaceLabel], ns.Annotations[fleet.ClusterLabel]
}

// claimable says whether cluster may use ns as its namespace: ns names
// cluster, or names no cluster at all (created ahead by an operator, or
// written before the manager annotated them). A namespace that names
// another Cluster is that one's and is refused.
func claimable(ns *corev1.Namespace, cluster *fleet.Cluster) error {
	ws, name := namespaceOwner(ns)
	switch {
	case ws == cluster.Namespace && name == cluster.Name:
		return nil
	case ws == "" && name == "":
		// Pre-created (with quotas, labels of the operator's) or written
		// before the manager annotated them: it names no other cluster.
		return nil
	}
	return &namespaceConflict{ns: ns.Name, owner: ws + "/" + name}
}

// ensureNamespace creates the namespace of cluster, or takes the existing
// one when it is the cluster's own (claimable); a *namespaceConflict
// otherwise, with nothing written.
func (r *ClusterReconciler) ensureNamespace(ctx context.Context, cluster *fleet.Cluster, ns string) error {
	want := clusterNamespace(cluster)
	// The namespace is usually there already (the registration created it,
	// or this is a resync): a look at the cache spares the write.
	have := &corev1.Namespace{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: ns}, have)
	if apierrors.IsNotFound(err) {
		err = r.Client.Create(ctx, want.DeepCopy(), fieldOwner)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// The cache was behind: another Cluster may have just created it.
		err = r.Reader.Get(ctx, client.ObjectKey{Name: ns}, have)
	}
	if err != nil {
		return err
	}
	if err := claimable(have, cluster); err != nil {
		return err
	}
	if have.Labels[fleet.ManagedLabel] == want.Labels[fleet.ManagedLabel] &&
		have.Annotations[fleet.ClusterNamespaceLabel] == want.Annotations[fleet.ClusterNamespaceLabel] &&
		have.Annotations[fleet.ClusterLabel] == want.Annotations[fleet.ClusterLabel] {
		return nil
	}
	// Label or annotate it, on the condition that it did not change since
	// it was checked: two Clusters adopting one namespace at once get a
	// conflict (retried, then refused), not both the namespace.
	base := have.DeepCopy()
	if have.Labels == nil {
		have.Labels = map[string]string{}
	}
	if have.Annotations == nil {
		have.Annotations = map[string]string{}
	}
	maps.Copy(have.Labels, want.Labels)
	maps.Copy(have.Annotations, want.Annotations)
	return r.Client.Patch(ctx, have, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), fieldOwner)
}

// refuseNamespace marks cluster as refused its namespace: no
// status.namespace (nothing is deployed or granted there for it), a
// condition, and an Event when it is new. Credentials granted to it there
// before (two Clusters that shared the namespace before it was checked)
// are revoked: its ServiceAccount, Role and RoleBinding in the namespace
// and its content ClusterRoleBindings, all labelled with its name.
func (r *ClusterReconciler) refuseNamespace(ctx context.Context, cluster *fleet.Cluster, conflict *namespaceConflict) error {
	if err := r.deleteGrants(ctx, cluster, conflict.ns); err != nil {
		return err
	}
	cluster.Status.Namespace = ""
	prev := meta.FindStatusCondition(cluster.Status.Conditions, fleet.ConditionProcessed)
	if prev == nil || prev.Reason != ReasonNamespaceConflict || prev.Message != conflict.Error() {
		ctrl.LoggerFrom(ctx).Info("refusing the cluster its namespace", "namespace", conflict.ns, "owner", conflict.owner)
		if r.Recorder != nil {
			r.Recorder.Eventf(cluster, nil, corev1.EventTypeWarning, ReasonNamespaceConflict, "ClaimNamespace", "%s", conflict.Error())
		}
	}
	setCond(&cluster.Status.Conditions, fleet.ConditionProcessed, metav1.ConditionFalse, ReasonNamespaceConflict, conflict.Error(), cluster.Generation)
	return nil
}

// ReasonInvalidName is the reason of a Cluster's Processed=False
// condition (and of its Event, and of a ClusterRegistration's
// Granted=False) when the Cluster's name is too long to be a label value.
const ReasonInvalidName = "InvalidName"

// clusterNameProblem says why a Cluster named name cannot be used, or "".
// Its BundleDeployments and its agent's credentials carry the name in label
// fleet.cattle.io/cluster (as in Rancher Fleet, whose tools select by it),
// and a label value holds at most 63 characters while a Cluster created by
// hand may have a name of 253: the API server would refuse every one of
// them, one failed write after another. A Cluster's name is a DNS-1123
// subdomain, whose characters a label value allows, so only its length can
// be wrong.
func clusterNameProblem(name string) string {
	if len(name) <= validation.LabelValueMaxLength {
		return ""
	}
	return fmt.Sprintf("the Cluster name is %d characters long, at most %d are allowed: it is the value of label %s on the cluster's BundleDeployments and agent credentials, "+
		"and a label value holds at most %d characters. No bundle can target this cluster, and it is neither given a namespace nor imported; "+
		"create the Cluster again under a shorter name and delete this one",
		len(name), validation.LabelValueMaxLength, fleet.ClusterLabel, validation.LabelValueMaxLength)
}

// refuseName marks cluster as unusable for its name (clusterNameProblem):
// no status.namespace, so that no bundle targets it, a Processed=False
// condition, and a Warning Event when the condition is new.
func (r *ClusterReconciler) refuseName(ctx context.Context, cluster *fleet.Cluster, msg string) error {
	old := cluster.DeepCopy()
	cluster.Status.Namespace = ""
	prev := meta.FindStatusCondition(cluster.Status.Conditions, fleet.ConditionProcessed)
	if prev == nil || prev.Reason != ReasonInvalidName || prev.Message != msg {
		ctrl.LoggerFrom(ctx).Info("refusing the cluster: its name is too long", "length", len(cluster.Name))
		if r.Recorder != nil {
			r.Recorder.Eventf(cluster, nil, corev1.EventTypeWarning, ReasonInvalidName, "Process", "%s", msg)
		}
	}
	setCond(&cluster.Status.Conditions, fleet.ConditionProcessed, metav1.ConditionFalse, ReasonInvalidName, msg, cluster.Generation)
	if equality.Semantic.DeepEqual(old.Status, cluster.Status) {
		return nil
	}
	err := r.Client.Status().Patch(ctx, cluster, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
	return client.IgnoreNotFound(err)
}

// clusterNamespace is the namespace object of a Cluster (contract 1), as
// both the Cluster and the registration controllers apply it.
func clusterNamespace(cluster *fleet.Cluster) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   names.ClusterNamespace(cluster.Namespace, cluster.Name),
		Labels: map[string]string{fleet.ManagedLabel: "true"},
		Annotations: map[string]string{
			fleet.ClusterNamespaceLabel: cluster.Namespace,
			fleet.ClusterLabel:          cluster.Name,
		},
	}}
}

// errRegistrationsLeft means a deleted Cluster's registrations are being
// deleted, but not gone yet: its clean-up waits for them.
var errRegistrationsLeft = errors.New("waiting for the cluster's registrations to be deleted")

// registrationOf says whether reg belongs to cluster: it was granted for
// it, or it is not granted yet and asks for the cluster's clientID (it
// would find, or create, this Cluster).
func registrationOf(reg *fleet.ClusterRegistration, cluster *fleet.Cluster) bool {
	if reg.Status.ClusterName != "" {
		return reg.Status.ClusterName == cluster.Name
	}
	return cluster.Spec.ClientID != "" && reg.Spec.ClientID == cluster.Spec.ClientID
}

// cleanupCluster revokes every credential of a deleted Cluster (its agent
// gets 401 from then on), deletes its registrations, its import token and
// its namespace. It keeps the Cluster (its finalizer) until the manager no
// longer sees any of its registrations: a registration waiting for the
// Cluster would otherwise create it again once it is gone. One that only
// a foreign finalizer keeps is not waited for (awaitedOnDelete).
func (r *ClusterReconciler) cleanupCluster(ctx context.Context, cluster *fleet.Cluster) error {
	regs := &RegistrationReconciler{reconcilerBase: r.reconcilerBase}
	var list fleet.ClusterRegistrationList
	if err := r.Client.List(ctx, &list, client.InNamespace(cluster.Namespace)); err != nil {
		return err
	}
	left := false
	for i := range list.Items {
		reg := &list.Items[i]
		if !registrationOf(reg, cluster) {
			continue
		}
		left = left || awaitedOnDelete(reg)
		if err := regs.revoke(ctx, reg); err != nil {
			return err
		}
		if err := deleteIfExists(ctx, r.Client, reg); err != nil {
			return err
		}
	}
	if left {
		return errRegistrationsLeft
	}
	// Sweep by label too, in case a registration object was removed by
	// hand: the grants in the cluster namespace and in the workspace.
	ns := names.ClusterNamespace(cluster.Namespace, cluster.Name)
	if err := r.deleteGrants(ctx, cluster, ns, cluster.Namespace); err != nil {
		return err
	}
	if err := deleteIfExists(ctx, r.Client, &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: importTokenName(cluster), Namespace: cluster.Namespace}}); err != nil {
		return err
	}
	return r.deleteOwnNamespace(ctx, cluster, ns)
}

// deleteGrants deletes, by their labels, what registrations granted
// cluster's agents: the ServiceAccounts of the cluster namespace ns, the
// Roles and RoleBindings of ns and of the other namespaces given, and the
// content ClusterRoleBindings.
func (r *ClusterReconciler) deleteGrants(ctx context.Context, cluster *fleet.Cluster, ns string, more ...string) error {
	if clusterNameProblem(cluster.Name) != "" {
		// No object can carry the name as a label value, and the API
		// server refuses it in a selector: the sweep would fail and keep
		// the Cluster from being deleted, with nothing to sweep.
		return nil
	}
	sel := client.MatchingLabels{fleet.ClusterLabel: cluster.Name, fleet.ClusterNamespaceLabel: cluster.Namespace}
	sweep := func(obj client.Object, opts ...client.DeleteAllOfOption) error {
		if err := r.Client.DeleteAllOf(ctx, obj, append(opts, sel)...); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	}
	if err := sweep(&corev1.ServiceAccount{}, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, n := range append([]string{ns}, more...) {
		for _, obj := range []client.Object{&rbacv1.RoleBinding{}, &rbacv1.Role{}} {
			if err := sweep(obj, client.InNamespace(n)); err != nil {
				return err
			}
		}
	}
	return sweep(&rbacv1.ClusterRoleBinding{})
}

// deleteOwnNamespace deletes ns if it is cluster's own (its annotations
// name the cluster): a namespace refused to the cluster belongs to another
// Cluster, or to no Fleet cluster at all, and stays.
func (r *ClusterReconciler) deleteOwnNamespace(ctx context.Context, cluster *fleet.Cluster, ns string) error {
	have := &corev1.Namespace{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: ns}, have); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ws, name := namespaceOwner(have); ws != cluster.Namespace || name != cluster.Name || !have.DeletionTimestamp.IsZero() {
		return nil
	}
	// Only the namespace that was checked: not one that replaced it since.
	pre := client.Preconditions{UID: &have.UID, ResourceVersion: &have.ResourceVersion}
	if err := r.Client.Delete(ctx, have, pre); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", ns, err)
	}
	return nil
}

// importRetry is the wait before re-checking an import that waits for
// something the manager creates itself (the import token).
const importRetry = 2 * time.Second
