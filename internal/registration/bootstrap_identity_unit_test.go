package registration

import (
	"errors"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestBindsClusterAdmin: only a binding of the system namespace's bootstrap
// ServiceAccount to ClusterRole cluster-admin is taken as the bootstrap
// identity; the others make the bootstrap stop with what to install.
func TestBindsClusterAdmin(t *testing.T) {
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: bootstrapSA, Namespace: "cattle-fleet-system"}
	admin := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}
	for _, tc := range []struct {
		name string
		crb  rbacv1.ClusterRoleBinding
		want bool
	}{
		{name: "chart's", crb: rbacv1.ClusterRoleBinding{RoleRef: admin, Subjects: []rbacv1.Subject{sa}}, want: true},
		{name: "with an admin's own subject", crb: rbacv1.ClusterRoleBinding{RoleRef: admin,
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "me"}, sa}}, want: true},
		{name: "other namespace", crb: rbacv1.ClusterRoleBinding{RoleRef: admin,
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: bootstrapSA, Namespace: "other"}}}},
		{name: "other role", crb: rbacv1.ClusterRoleBinding{RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{sa}}},
		{name: "no subjects", crb: rbacv1.ClusterRoleBinding{RoleRef: admin}},
	} {
		if got := bindsClusterAdmin(&tc.crb, "cattle-fleet-system"); got != tc.want {
			t.Errorf("%s: bindsClusterAdmin = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBootstrapIdentityErrorSaysWhatToInstall: the message names the
// missing object and the install step, and keeps the API server's cause.
func TestBootstrapIdentityErrorSaysWhatToInstall(t *testing.T) {
	cause := errors.New("forbidden")
	err := error(&BootstrapIdentityError{Object: "ClusterRoleBinding " + bootstrapSA, Namespace: "cattle-fleet-system",
		Problem: "is missing and fleet-controller may not create it", Err: cause})
	msg := err.Error()
	for _, want := range []string{"ClusterRoleBinding fleet-controller-bootstrap is missing", "(forbidden)",
		"bootstrap.enabled=true in namespace cattle-fleet-system", "ServiceAccount cattle-fleet-system/fleet-controller-bootstrap"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if !errors.Is(err, cause) {
		t.Errorf("the API server's error is not wrapped")
	}
}
