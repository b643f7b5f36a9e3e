package bundle

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Content RBAC (contract 3): each cluster namespace has one ClusterRole,
// fleet-content-<namespace>, bound to that cluster's agent, with a single
// rule `get contents` whose resourceNames are the Contents the cluster may
// read. The content package's RoleReconciler keeps it equal to the Contents
// referenced by the namespace's BundleDeployments; the bundle reconciler
// grants a new Content *before* it writes a BundleDeployment pointing at it
// (grant before publish), so an agent never sees a deployment it cannot read.
//
// A grant made ahead of the reference is recorded in GrantsAnnotation with
// its time, so that the RoleReconciler, whose cache may not show the new
// BundleDeployment yet, keeps it for a grace period instead of racing it
// away.
const (
	// ContentRoleLabel marks the ClusterRoles of Content RBAC; its value
	// is the cluster namespace.
	ContentRoleLabel = "fleet.cattle.io/content-role-for"
	// GrantsAnnotation holds a JSON object {contentName: unixSeconds} of
	// Contents granted ahead of the BundleDeployment that references them.
	GrantsAnnotation = "fleet.cattle.io/content-grants"
)

// ContentRoleName is the ClusterRole of a cluster namespace.
func ContentRoleName(clusterNamespace string) string { return "fleet-content-" + clusterNamespace }

// ContentRules is the single rule of a role: get on exactly these Contents;
// no rule at all when there are none (an empty resourceNames would allow
// every Content).
func ContentRules(contents []string) []rbacv1.PolicyRule {
	if len(contents) == 0 {
		return nil
	}
	names := slices.Clone(contents)
	slices.Sort(names)
	names = slices.Compact(names)
	return []rbacv1.PolicyRule{{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"contents"}, Verbs: []string{"get"}, ResourceNames: names}}
}

// GrantedContents returns the Content names a role's rules allow `get` on.
func GrantedContents(role *rbacv1.ClusterRole) []string {
	var out []string
	for _, r := range role.Rules {
		if slices.Contains(r.Verbs, "get") && slices.Contains(r.Resources, "contents") {
			out = append(out, r.ResourceNames...)
		}
	}
	return out
}

// Grants parses GrantsAnnotation; a malformed value counts as no grants
// (the reconciler then rewrites it).
func Grants(role *rbacv1.ClusterRole) map[string]time.Time {
	raw := role.Annotations[GrantsAnnotation]
	if raw == "" {
		return nil
	}
	var secs map[string]int64
	if err := json.Unmarshal([]byte(raw), &secs); err != nil {
		return nil
	}
	out := make(map[string]time.Time, len(secs))
	for k, v := range secs {
		out[k] = time.Unix(v, 0)
	}
	return out
}

// SetGrants stores grants in GrantsAnnotation (removing it when empty).
func SetGrants(role *rbacv1.ClusterRole, grants map[string]time.Time) {
	if len(grants) == 0 {
		delete(role.Annotations, GrantsAnnotation)
		return
	}
	secs := make(map[string]int64, len(grants))
	for k, v := range grants {
		secs[k] = v.Unix()
	}
	raw, _ := json.Marshal(secs) // map keys are sorted: stable output
	if role.Annotations == nil {
		role.Annotations = map[string]string{}
	}
	role.Annotations[GrantsAnnotation] = string(raw)
}

// grantAttempts bounds the optimistic-lock retries of one grant.
const grantAttempts = 5

// grantContents makes the ClusterRole of namespace ns allow the Contents
// named, before a BundleDeployment there references them. It reads the role
// from the cache and writes only when a name is missing, so a rollout costs
// one ClusterRole update per cluster and an unchanged deployment none. The
// update carries the resourceVersion read (optimistic lock): on a conflict
// it re-reads the role from the API server and retries, so it can neither
// lose a concurrent grant nor undo a concurrent prune's other changes.
func (r *Reconciler) grantContents(ctx context.Context, ns string, contents []string) error {
	if len(contents) == 0 {
		return nil
	}
	key := types.NamespacedName{Name: ContentRoleName(ns)}
	var reader client.Reader = r.Client
	for attempt := 0; ; attempt++ {
		role := &rbacv1.ClusterRole{}
		err := reader.Get(ctx, key, role)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading ClusterRole %s: %w", key.Name, err)
		}
		exists := err == nil
		have := GrantedContents(role)
		var missing []string
		for _, c := range contents {
			if !slices.Contains(have, c) {
				missing = append(missing, c)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		grants := Grants(role)
		if grants == nil {
			grants = map[string]time.Time{}
		}
		now := time.Now()
		for _, c := range missing {
			grants[c] = now
		}
		if exists {
			role.Rules = ContentRules(append(have, missing...))
			SetGrants(role, grants)
			if role.Labels == nil {
				role.Labels = map[string]string{}
			}
			role.Labels[ContentRoleLabel] = ns
			role.Labels[fleet.ManagedLabel] = "true"
			err = r.Update(ctx, role)
		} else {
			role = &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: key.Name, Labels: map[string]string{ContentRoleLabel: ns, fleet.ManagedLabel: "true"}},
				Rules:      ContentRules(missing),
			}
			SetGrants(role, grants)
			err = r.Create(ctx, role)
		}
		if err == nil {
			return nil
		}
		if (!apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err)) || attempt+1 >= grantAttempts {
			return fmt.Errorf("granting Contents %v in ClusterRole %s: %w", missing, key.Name, err)
		}
		// The cache was behind: read the live role and try again.
		reader = r.APIReader
	}
}
