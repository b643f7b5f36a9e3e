package controller

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/kubeclient"
)

// BuildAnnotation is written on every Bundle a sync applies: how many
// Bundles the build made and a hash of their names and of the service
// account and client Secret it was made with (authorize's defaults
// included; see buildRecord). The set of names and the grant live in
// memory only (built, granted); a manager that did not make the build
// (after a restart) compares the Bundles it finds with this record, so
// that a Bundle deleted, or a Policy or restriction default changed,
// while no manager was running rebuilds the commit at once instead of at
// the next commit.
const BuildAnnotation = "fleet.cattle.io/gitrepo-build"

// staleBuild stands for the gone Bundles when those found after a
// restart do not match their build record: which ones are missing (or
// whether only the grant changed) is not known, only that the commit
// must be built again. No Bundle name contains a space.
const staleBuild = "build record differs"

// buildRecord is the BuildAnnotation value of a build of the Bundles
// named names with grant.
func buildRecord(names []string, grant [2]string) string {
	sorted := slices.Sorted(slices.Values(names))
	raw, _ := json.Marshal(struct {
		Bundles []string  `json:"bundles"`
		Grant   [2]string `json:"grant"`
	}{Bundles: sorted, Grant: grant})
	sum := sha256.Sum256(raw)
	return fmt.Sprintf("%d-%x", len(sorted), sum[:16])
}

// ownNames are the names of the Bundles of a build that goneBundles can
// see: apply puts a Bundle naming no namespace in the GitRepo's, the only
// one goneBundles looks in.
func ownNames(repo *fleet.GitRepo, bundles []*fleet.Bundle) []string {
	names := make([]string, 0, len(bundles))
	for _, b := range bundles {
		if b.Namespace == "" || b.Namespace == repo.Namespace {
			names = append(names, b.Name)
		}
	}
	return names
}

// stampBuild writes the build record on every Bundle of a build before it
// is applied.
func stampBuild(repo *fleet.GitRepo, bundles []*fleet.Bundle, grant [2]string) {
	record := buildRecord(ownNames(repo, bundles), grant)
	for _, b := range bundles {
		if b.Annotations == nil {
			b.Annotations = map[string]string{}
		}
		b.Annotations[BuildAnnotation] = record
	}
}

// goneBundles returns, sorted, the Bundles of the GitRepo's current commit
// (built) that no longer exist: deleted by someone else, since the
// GitRepo's own prune takes a Bundle out of built before deleting it. One
// still being deleted is not gone yet (writing it now would fail while its
// finalizers run); the Bundle watch brings the GitRepo back once it has
// gone. The cache may lag behind a Bundle the last sync created, so what
// it lacks is looked up on the API server before it counts as gone. On an
// error nothing counts as gone: the next poll looks again. For a GitRepo
// this process has not built yet, seedBuilt decides, with grant (what
// authorize gives now).
func (r *Reconciler) goneBundles(ctx context.Context, repo *fleet.GitRepo, grant [2]string) []string {
	key := client.ObjectKeyFromObject(repo)
	r.mu.Lock()
	built, known := r.built[key]
	r.mu.Unlock()
	applied := repo.Status.Commit != "" && repo.Status.ObservedGeneration == repo.Generation &&
		repo.Status.UpdateGeneration == repo.Spec.ForceSyncGeneration
	if (known && len(built) == 0) || (!known && !applied) {
		// Nothing built, or a sync is due anyway (it records built).
		return nil
	}
	log := ctrl.LoggerFrom(ctx)
	var list fleet.BundleList
	// Read-only use of the cached objects: only names and annotations are
	// looked at.
	if err := r.Client.List(ctx, &list, client.InNamespace(repo.Namespace), client.MatchingLabels{fleet.RepoLabel: repo.Name}, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "listing bundles", "gitrepo", key)
		return nil
	}
	if !known {
		return r.seedBuilt(ctx, key, repo.Status.Commit, grant, list.Items)
	}
	present := make(map[string]bool, len(list.Items))
	for i := range list.Items {
		present[list.Items[i].Name] = true
	}
	var gone []string
	for name := range built {
		if present[name] {
			continue
		}
		live := kubeclient.MetadataOf(fleet.GroupVersion.WithKind("Bundle"))
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: name}, live)
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			log.Error(err, "reading bundle", "gitrepo", key, "bundle", name)
			return nil
		}
		gone = append(gone, name)
	}
	slices.Sort(gone)
	return gone
}

// seedBuilt fills built and granted for a GitRepo this process has not
// synced yet (after a restart) from its Bundles labelled with the applied
// commit (every sync labels all of them), when they carry one build
// record that matches their names and the grant of now. Otherwise a
// Bundle was deleted, or a default of the Policies or restrictions
// changed, while no manager watched (or the commit gave none): it returns
// staleBuild, so that the commit is
// built again once, and leaves built unknown until that build succeeds.
// While any Bundle of the GitRepo is being deleted nothing is decided:
// the Bundle watch brings the GitRepo back once it has gone.
func (r *Reconciler) seedBuilt(ctx context.Context, key types.NamespacedName, commit string, grant [2]string, bundles []fleet.Bundle) []string {
	var names []string
	records := map[string]bool{}
	for i := range bundles {
		b := &bundles[i]
		if !b.DeletionTimestamp.IsZero() {
			return nil
		}
		if b.Labels[fleet.CommitLabel] == commit {
			names = append(names, b.Name)
			records[b.Annotations[BuildAnnotation]] = true
		}
	}
	if len(names) > 0 && len(records) == 1 && records[""] {
		// Written by a version without the record (the first start after
		// an upgrade): trusted as those versions did, rather than every
		// GitRepo fetched and built again at once, which could also
		// resolve an unpinned chart version anew. They get the record
		// now, so that the next restart checks them like any other.
		r.seed(key, names, grant)
		r.stamp(ctx, key.Namespace, names, buildRecord(names, grant))
		return nil
	}
	if len(records) != 1 || !records[buildRecord(names, grant)] {
		ctrl.LoggerFrom(ctx).V(1).Info("bundles do not match the build of the applied commit; building it again",
			"gitrepo", key, "commit", commit, "bundles", len(names))
		return []string{staleBuild}
	}
	r.seed(key, names, grant)
	return nil
}

// stamp writes record as the BuildAnnotation of the Bundles names in ns.
// A failure is logged only: those Bundles are trusted again at the next
// restart, as before the record existed.
func (r *Reconciler) stamp(ctx context.Context, ns string, names []string, record string) {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, BuildAnnotation, record)
	for _, name := range names {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := r.Client.Patch(ctx, b, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
			ctrl.LoggerFrom(ctx).Error(err, "recording the build on a bundle", "bundle", name)
		}
	}
}

// seed records names and grant as the build of key, unless this process
// has recorded one meanwhile.
func (r *Reconciler) seed(key types.NamespacedName, names []string, grant [2]string) {
	set := make(map[string]bool, len(names))
	for _, name := range names {
		set[name] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.built[key]; !ok {
		r.built[key] = set
	}
	if _, ok := r.granted[key]; !ok {
		r.granted[key] = grant
	}
}

// recordBuilt notes which Bundles an apply of repo's commit left: after
// a success exactly those written (apply pruned the others); after a
// failure the previous set without those it pruned (apply prunes only
// once every Bundle is written, and stops at the first failed deletion).
// The sets are replaced, never changed in place, so a copy read under mu
// stays valid.
func (r *Reconciler) recordBuilt(repo *fleet.GitRepo, bundles []*fleet.Bundle, res *apply.Result, err error) {
	key := client.ObjectKeyFromObject(repo)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		names := make(map[string]bool, len(bundles))
		for _, name := range ownNames(repo, bundles) {
			names[name] = true
		}
		r.built[key] = names
		return
	}
	prev, ok := r.built[key]
	if !ok || res == nil || len(res.Deleted) == 0 {
		return
	}
	names := maps.Clone(prev)
	for _, name := range res.Deleted {
		delete(names, name)
	}
	r.built[key] = names
}
