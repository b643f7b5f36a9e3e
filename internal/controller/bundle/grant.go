package bundle

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
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
func ContentRoleName(clusterNamespace string) string { return names.ContentRoleName(clusterNamespace) }

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

// SetContentRole makes role the Content role of cluster namespace ns: its
// name, the single rule allowing exactly names, the grants annotation, and
// the labels the manager's cache selects it by. The bundle reconciler
// (grants) and the content role reconciler (repair, prune) both write roles
// through it, so the two cannot disagree on what a role looks like.
func SetContentRole(role *rbacv1.ClusterRole, ns string, names []string, grants map[string]time.Time) {
	role.Name = ContentRoleName(ns)
	role.Rules = ContentRules(names)
	SetGrants(role, grants)
	if role.Labels == nil {
		role.Labels = map[string]string{}
	}
	role.Labels[ContentRoleLabel] = ns
	role.Labels[fleet.ManagedLabel] = "true"
}

// grantAttempts bounds the optimistic-lock retries of one grant.
const grantAttempts = 5

// grantContents makes the ClusterRole of namespace ns allow the Contents
// named, before a BundleDeployment there references them. When the cached
// role already allows them (an unchanged deployment, or a Content another
// bundle granted) it writes nothing; otherwise the request joins the
// namespace's grant batch, so that a rollout costs about one ClusterRole
// update per cluster however many bundles change at once.
func (r *Reconciler) grantContents(ctx context.Context, ns string, contents []string) error {
	if !r.Opts.ContentRBAC || len(contents) == 0 {
		return nil
	}
	role := &rbacv1.ClusterRole{}
	if err := r.Get(ctx, types.NamespacedName{Name: ContentRoleName(ns)}, role); err == nil && missingContents(role, contents) == nil {
		return nil
	}
	return r.grants.grant(ctx, ns, contents, r.writeGrant)
}

// grantBase carries the role one round of a namespace's grant writer wrote
// to the next round.
type grantBase struct{ role *rbacv1.ClusterRole }

// missingContents are the names of contents the role does not allow yet.
func missingContents(role *rbacv1.ClusterRole, contents []string) []string {
	have := GrantedContents(role)
	var missing []string
	for _, c := range contents {
		if !slices.Contains(have, c) && !slices.Contains(missing, c) {
			missing = append(missing, c)
		}
	}
	return missing
}

// writeGrant adds contents to the role in one write. It starts from the role
// the previous round wrote, else from the cache; the update carries the
// resourceVersion read (optimistic lock): on a conflict it re-reads the role
// from the API server and retries, so it can neither lose a concurrent
// grant nor undo a concurrent prune's other changes.
func (r *Reconciler) writeGrant(ctx context.Context, ns string, contents []string, base *grantBase) error {
	key := types.NamespacedName{Name: ContentRoleName(ns)}
	var reader client.Reader = r.Client
	for attempt := 0; ; attempt++ {
		role := &rbacv1.ClusterRole{}
		var err error
		if attempt == 0 && base.role != nil {
			role = base.role.DeepCopy()
		} else if err = reader.Get(ctx, key, role); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading ClusterRole %s: %w", key.Name, err)
		}
		exists := err == nil
		missing := missingContents(role, contents)
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
			SetContentRole(role, ns, append(GrantedContents(role), missing...), grants)
			err = r.Update(ctx, role)
		} else {
			role = &rbacv1.ClusterRole{}
			SetContentRole(role, ns, missing, grants)
			err = r.Create(ctx, role)
		}
		if err == nil {
			base.role = role
			return nil
		}
		if (!apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err)) || attempt+1 >= grantAttempts {
			return fmt.Errorf("granting Contents %v in ClusterRole %s: %w", missing, key.Name, err)
		}
		// The cache (or the previous round) was behind: read the live role
		// and try again.
		reader = r.APIReader
	}
}
