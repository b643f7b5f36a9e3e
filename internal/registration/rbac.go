package registration

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/names"
)

// Labels put on every object created for one agent credential, so that a
// deleted Cluster's objects can be found and removed.
const (
	labelCredentialOf = fleet.CredentialOfRegistrationLabel
	labelTokenOf      = "fleet.cattle.io/import-token"
)

// grant is everything one agent credential consists of.
type grant struct {
	// SA is the request ServiceAccount in the cluster namespace.
	SA string
	// Registration names the ClusterRegistration (namespace = workspace).
	Registration     string
	Workspace        string
	Cluster          string
	ClusterNamespace string
	// ContentRBAC adds the ClusterRoleBinding to the cluster's Content
	// role (Options.ContentRBAC).
	ContentRBAC bool
	// StatusAPI lets the credential report check-ins through the content
	// API (`update clusterstatuses` in the cluster namespace): the manager
	// serves them.
	StatusAPI bool
	// NoWorkspaceGrant leaves out the Role and RoleBinding in the
	// workspace that let the agent patch its Cluster's status: its agent
	// reports through the content API (contentapi.ClusterStatusAnnotation).
	NoWorkspaceGrant bool
}

func (g grant) labels() map[string]string {
	return map[string]string{
		fleet.ManagedLabel:          "true",
		fleet.ClusterLabel:          g.Cluster,
		fleet.ClusterNamespaceLabel: g.Workspace,
		labelCredentialOf:           g.Registration,
	}
}

func (g grant) subject() rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: g.SA, Namespace: g.ClusterNamespace}
}

// objects returns the ServiceAccount and RBAC of contract 3: read its own
// BundleDeployments and write their status, get (by name only) the
// Secrets, ConfigMaps and BundleContents (the content API) of its
// namespace, renew its own token; patch the status of its own Cluster only (or, with StatusAPI, report it
// through the content API; with NoWorkspaceGrant only that). With ContentRBAC it may also
// read the Contents the Content controller lists in
// fleet-content-<clusterNamespace>.
func (g grant) objects() []client.Object {
	meta := func(name, ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: g.labels(), Annotations: map[string]string{
			fleet.ClusterLabel:             g.Cluster,
			fleet.ClusterRegistrationLabel: g.Registration,
			fleet.ClusterRegistrationNS:    g.Workspace,
		}}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: meta(g.SA, g.ClusterNamespace)}
	nsRole := &rbacv1.Role{ObjectMeta: meta(g.SA, g.ClusterNamespace), Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"bundledeployments"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"bundledeployments/status"}, Verbs: []string{"update", "patch"}},
		// get only (as Rancher's fleet-bundle-deployment role): the agent
		// reads a values Secret, or a Secret or ConfigMap named in
		// downstreamResources, by name and never caches them upstream, so
		// list and watch would only hand it every other Secret there.
		{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get"}},
		{APIGroups: []string{contentapi.Group}, Resources: []string{contentapi.Resource}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{g.SA}},
	}}
	if g.StatusAPI {
		nsRole.Rules = append(nsRole.Rules, rbacv1.PolicyRule{APIGroups: []string{contentapi.Group}, Resources: []string{contentapi.ClusterStatusResource}, Verbs: []string{"update"}})
	}
	nsBinding := &rbacv1.RoleBinding{ObjectMeta: meta(g.SA, g.ClusterNamespace),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: g.SA},
		Subjects: []rbacv1.Subject{g.subject()}}
	wsRole := &rbacv1.Role{ObjectMeta: meta(g.SA, g.Workspace), Rules: []rbacv1.PolicyRule{
		// patch only, as Rancher Fleet grants it: the agent merge-patches
		// its own fields (heartbeat), and update would let it replace the
		// whole status. It still can write any status field with a patch,
		// so the manager trusts none it does not check (status.namespace:
		// ClusterReconciler restores it, targeting ignores a wrong one).
		{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusters/status"}, Verbs: []string{"patch"}, ResourceNames: []string{g.Cluster}},
	}}
	wsBinding := &rbacv1.RoleBinding{ObjectMeta: meta(g.SA, g.Workspace),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: g.SA},
		Subjects: []rbacv1.Subject{g.subject()}}
	content := &rbacv1.ClusterRoleBinding{ObjectMeta: meta(names.ContentBindingName(g.SA), ""),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: names.ContentRoleName(g.ClusterNamespace)},
		Subjects: []rbacv1.Subject{g.subject()}}
	objs := []client.Object{sa, nsRole, nsBinding}
	if !g.NoWorkspaceGrant {
		objs = append(objs, wsRole, wsBinding)
	}
	if g.ContentRBAC {
		objs = append(objs, content)
	}
	return objs
}

// credsAccess lets the import ServiceAccount of a token read exactly one
// registration secret (resourceNames): `get` it, or `list` and `watch` it by
// name (a field selector on metadata.name, which is how the agent waits for
// it), and `delete` it once the agent has stored the credential; nothing
// else in that namespace.
func credsAccess(ns, secretName, tokenSA, tokenNS string, labels map[string]string) (*rbacv1.Role, *rbacv1.RoleBinding) {
	name := secretName + "-creds"
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "delete"}, ResourceNames: []string{secretName}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: tokenSA, Namespace: tokenNS}}}
	return role, binding
}

// tokenObjects are the import ServiceAccount of a ClusterRegistrationToken
// and its only permissions: create ClusterRegistrations in the workspace,
// and fetch the credential of a registration it made (contentapi).
func tokenObjects(tokenName, ns, sa string, owner metav1.OwnerReference) []client.Object {
	meta := metav1.ObjectMeta{Namespace: ns, Labels: map[string]string{fleet.ManagedLabel: "true", labelTokenOf: tokenName},
		OwnerReferences: []metav1.OwnerReference{owner}}
	m := func(name string) metav1.ObjectMeta { x := *meta.DeepCopy(); x.Name = name; return x }
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: m(sa)},
		&rbacv1.Role{ObjectMeta: m(sa + "-role"), Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusterregistrations"}, Verbs: []string{"create"}},
			// The manager hands each credential only to the token its
			// registration was made with (Credentials).
			{APIGroups: []string{contentapi.Group}, Resources: []string{contentapi.CredentialResource}, Verbs: []string{"get", "watch"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: m(sa + "-to-role"),
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa + "-role"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}},
	}
}

// GrantedRules are all the RBAC rules the registration controllers write
// into Roles: the registration token's, an agent's (its cluster namespace
// and its workspace) and the read grant of a hand-over Secret. The API
// server lets the manager write a rule only if it holds it itself (no
// escalate verb), so its ClusterRole must cover every one of them (checked
// against the chart in internal/install).
func GrantedRules() []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	objs := tokenObjects("tok", "ws", "tok-sa", metav1.OwnerReference{})
	objs = append(objs, grant{SA: "sa", Registration: "r", Workspace: "ws", Cluster: "c", ClusterNamespace: "cns", ContentRBAC: true, StatusAPI: true}.objects()...)
	role, _ := credsAccess("sys", "secret", "tok-sa", "ws", nil)
	objs = append(objs, role)
	for _, o := range objs {
		if r, ok := o.(*rbacv1.Role); ok {
			out = append(out, r.Rules...)
		}
	}
	return out
}
