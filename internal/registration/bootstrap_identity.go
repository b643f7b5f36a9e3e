package registration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// BootstrapIdentityError says that the bootstrap ServiceAccount
// (fleet-controller-bootstrap in the system namespace) or its
// ClusterRoleBinding to cluster-admin is missing and the manager may not
// create it, or that the binding does not make that ServiceAccount
// cluster-admin. Granting cluster-admin needs the bind verb (or
// cluster-admin itself), which the fleet chart deliberately does not give
// fleet-controller: the chart creates both objects itself (bootstrap.enabled).
// It is an install step that is missing, not a passing failure; the
// bootstrap still retries, so that it goes on once an admin created them.
type BootstrapIdentityError struct {
	// Object names what is wrong, e.g. "ClusterRoleBinding fleet-controller-bootstrap".
	Object string
	// Namespace is the system namespace of the ServiceAccount.
	Namespace string
	// Problem says what is wrong with Object, e.g. "is missing and
	// fleet-controller may not create it".
	Problem string
	// Err is the API server's refusal, if any.
	Err error
}

func (e *BootstrapIdentityError) Error() string {
	msg := e.Object + " " + e.Problem
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return fmt.Sprintf("%s: install the fleet chart with bootstrap.enabled=true in namespace %s, "+
		"or create, as a cluster admin, ServiceAccount %s/%s and ClusterRoleBinding %s to ClusterRole cluster-admin for it",
		msg, e.Namespace, e.Namespace, bootstrapSA, bootstrapSA)
}

func (e *BootstrapIdentityError) Unwrap() error { return e.Err }

// ensureBootstrapIdentity makes sure the bootstrap ServiceAccount and its
// cluster-admin ClusterRoleBinding exist. They are read first and created
// only when missing: with the chart they exist and fleet-controller could
// not write the binding anyway, while a manager run with an admin
// kubeconfig (`fleet dev up`, no chart) creates them. An existing binding
// is never updated: an update of a binding to cluster-admin needs bind as
// well, and what an admin set up is theirs.
func (b *reconcilerBase) ensureBootstrapIdentity(ctx context.Context) error {
	sysNS := b.Opts.SystemNamespace
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: bootstrapSA, Namespace: sysNS}}
	if err := b.createIfMissing(ctx, sa, &corev1.ServiceAccount{}, "ServiceAccount "+sysNS+"/"+bootstrapSA); err != nil {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: bootstrapSA},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: bootstrapSA, Namespace: sysNS}}}
	existing := &rbacv1.ClusterRoleBinding{}
	if err := b.createIfMissing(ctx, crb, existing, "ClusterRoleBinding "+bootstrapSA); err != nil {
		return err
	}
	// A binding that exists but does not make the ServiceAccount
	// cluster-admin (the chart installed for another namespace, an admin's
	// own binding of that name) would give the local agent install a
	// token that is refused half-way: say so now instead. Nothing to
	// check when the binding was just created (existing is not read).
	if existing.Name != "" && !bindsClusterAdmin(existing, sysNS) {
		return &BootstrapIdentityError{Object: "ClusterRoleBinding " + bootstrapSA, Namespace: sysNS,
			Problem: "exists but does not bind ServiceAccount " + sysNS + "/" + bootstrapSA + " to ClusterRole cluster-admin, and fleet-controller does not change it"}
	}
	return nil
}

// bindsClusterAdmin says whether crb binds the bootstrap ServiceAccount of
// sysNS to ClusterRole cluster-admin.
func bindsClusterAdmin(crb *rbacv1.ClusterRoleBinding, sysNS string) bool {
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != "cluster-admin" {
		return false
	}
	for _, s := range crb.Subjects {
		if s.Kind == rbacv1.ServiceAccountKind && s.Name == bootstrapSA && s.Namespace == sysNS {
			return true
		}
	}
	return false
}

// createIfMissing creates obj unless it exists (read into existing, from
// the API server: RBAC and ServiceAccounts are not cached). A read that is
// refused is not taken as "missing or present": the create says which.
func (b *reconcilerBase) createIfMissing(ctx context.Context, obj, existing client.Object, what string) error {
	err := b.Reader.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	switch {
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
		return fmt.Errorf("reading %s: %w", what, err)
	}
	err = b.Client.Create(ctx, obj, fieldOwner)
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsForbidden(err):
		return &BootstrapIdentityError{Object: what, Namespace: b.Opts.SystemNamespace, Problem: "is missing and fleet-controller may not create it", Err: err}
	}
	return fmt.Errorf("creating %s: %w", what, err)
}

// warnLocalCluster records msg as a Warning Event with reason on Cluster
// "local", where users look (kubectl describe cluster local), and says
// whether it could.
func (b *Bootstrap) warnLocalCluster(ctx context.Context, reason, msg string) bool {
	cluster := &fleet.Cluster{}
	if b.Recorder == nil || b.Reader.Get(ctx, client.ObjectKey{Namespace: b.Opts.BootstrapNamespace, Name: fleet.LocalClusterName}, cluster) != nil {
		return false
	}
	b.Recorder.Eventf(cluster, nil, corev1.EventTypeWarning, reason, "Bootstrap", "%s", msg)
	return true
}

// ReasonBootstrapIdentityMissing is the reason of the Warning Event on
// Cluster "local" when its kubeconfig cannot be made (BootstrapIdentityError).
const ReasonBootstrapIdentityMissing = "BootstrapIdentityMissing"
