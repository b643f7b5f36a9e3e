package bundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// Keys of the per-BundleDeployment values Secret (contract 5).
const (
	ValuesKey       = "values"
	StagedValuesKey = "stagedValues"
)

// DeploymentLabels are a BundleDeployment's labels, as in Fleet: the
// bundle's labels without kubectl.kubernetes.io/* keys and Rancher-internal
// keys, those containing "cattle.io/" (wrangler's
// CleanAnnotationsForExport; "provider.cattle.io" or
// "example.com/cattle.io-owner" stay), but with every fleet.cattle.io/*
// one, then the bundle, cluster and content references.
func DeploymentLabels(b *fleet.Bundle, c *fleet.Cluster, manifestID string) map[string]string {
	out := map[string]string{}
	for k, v := range b.Labels {
		if strings.HasPrefix(k, "kubectl.kubernetes.io/") || (strings.Contains(k, "cattle.io/") && !strings.HasPrefix(k, fleet.LabelPrefix)) {
			continue
		}
		out[k] = v
	}
	out[fleet.BundleLabel] = b.Name
	out[fleet.BundleNamespaceLabel] = b.Namespace
	out[fleet.ManagedLabel] = "true"
	out[fleet.ClusterLabel] = c.Name
	out[fleet.ClusterNamespaceLabel] = c.Namespace
	if len(manifestID) <= 63 {
		out[fleet.ContentNameLabel] = manifestID
	}
	return out
}

// stripValues removes Helm values from options; they go to the Secret.
func stripValues(o *fleet.BundleDeploymentOptions) map[string]interface{} {
	if o.Helm == nil || o.Helm.Values == nil {
		return nil
	}
	v := o.Helm.Values.Data
	o.Helm.Values = nil
	return v
}

func valuesJSON(v map[string]interface{}) ([]byte, error) {
	if len(v) == 0 {
		return nil, nil
	}
	return json.Marshal(v)
}

// ValuesHash is the hex sha256 of the values JSON, empty without values.
func ValuesHash(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	d := sha256.Sum256(data)
	return hex.EncodeToString(d[:])
}

// writeDeployment creates or updates one BundleDeployment (and first its
// values Secret) when it differs from what the cache shows.
func (r *Reconciler) writeDeployment(ctx context.Context, b *fleet.Bundle, manifestID string, p *target.Plan, cached *fleet.BundleDeployment) error {
	bd := p.Deployment
	if r.cacheBehind(client.ObjectKeyFromObject(bd), b.Namespace+"/"+b.Name, cached) {
		return nil
	}
	if cached == nil {
		if err := r.nameFree(ctx, b, bd); err != nil {
			return err
		}
	}
	bd.Labels = DeploymentLabels(b, p.Target.Cluster, manifestID)
	bd.Spec.DependsOn = b.Spec.DependsOn
	bd.Spec.CorrectDrift = bd.Spec.Options.CorrectDrift
	bd.Spec.OCIContents = b.Spec.ContentsID != ""
	bd.Spec.Paused = p.Target.Paused
	bd.Spec.OffSchedule = OffSchedule(p.Target.Cluster)

	stagedValues := stripValues(&bd.Spec.StagedOptions)
	currentValues := stripValues(&bd.Spec.Options)
	idsChanged := cached == nil || cached.Spec.DeploymentID != bd.Spec.DeploymentID || cached.Spec.StagedDeploymentID != bd.Spec.StagedDeploymentID
	if idsChanged {
		if bd.Spec.DeploymentID == bd.Spec.StagedDeploymentID {
			// Promoted (or unchanged): current values are the staged ones.
			currentValues = stagedValues
		} else if cached != nil {
			// Current version held back: keep its values as stored.
			old, err := r.readValues(ctx, cached)
			if err != nil {
				return err
			}
			currentValues = old
		}
		hash, err := r.writeValues(ctx, b, bd, currentValues, stagedValues, cached)
		if err != nil {
			return err
		}
		bd.Spec.ValuesHash = hash
	} else if cached != nil {
		bd.Spec.ValuesHash = cached.Spec.ValuesHash
	}

	var srcErr error
	if len(downstreamRefs(bd)) > 0 {
		changed, err := r.syncDownstreamResources(ctx, b, bd, cached)
		switch {
		case errors.Is(err, ErrDownstreamSource):
			// Reported on the Bundle for this target; the deployment is
			// still written (nothing deleted), creating the source fixes it.
			srcErr = err
		case err != nil:
			return err
		}
		if changed && cached != nil {
			// The agent redeploys when this generation moves.
			bd.Spec.DownstreamResourcesGeneration = cached.Spec.DownstreamResourcesGeneration + 1
		}
	}
	if err := r.putDeployment(ctx, bd, cached); err != nil {
		return err
	}
	return srcErr
}

// nameFree checks, in the cache, that no other bundle's deployment holds
// bd's name. A deployment is named after its bundle in the cluster's
// namespace, so two bundles of one name in different workspaces that a
// BundleNamespaceMapping brings to the same cluster would share it: the
// second would overwrite the first's values Secret and then find its own
// create refused as "already exists", forever Pending without a word.
func (r *Reconciler) nameFree(ctx context.Context, b *fleet.Bundle, bd *fleet.BundleDeployment) error {
	other := &fleet.BundleDeployment{}
	err := r.Get(ctx, client.ObjectKeyFromObject(bd), other)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	return takenBy("BundleDeployment", other, b.Namespace, b.Name)
}

// takenBy is an error when obj (a deployment or its values Secret) is
// labelled as another bundle's than ns/name; nil when it is that bundle's
// or carries no bundle labels.
func takenBy(what string, obj client.Object, ns, name string) error {
	l := obj.GetLabels()
	ons, oname := l[fleet.BundleNamespaceLabel], l[fleet.BundleLabel]
	if (ons == "" && oname == "") || (ons == ns && oname == name) {
		return nil
	}
	return fmt.Errorf("%s %s/%s belongs to bundle %s/%s, which has the same name: bundles that reach the same cluster need distinct names",
		what, obj.GetNamespace(), obj.GetName(), ons, oname)
}

// cacheBehind reports whether the cache has not yet seen this reconciler's
// last write of the deployment. A pass that runs while the informer lags
// (a busy API server, a large rollout) would otherwise write again from the
// stale copy, only to get a conflict, or create again what it has just
// created, only to get AlreadyExists: at 50 bundles × 50 clusters that was
// half of the manager's writes. The event of the write it missed requeues
// the bundle anyway. A write the cache never shows (the object was deleted
// again before the informer caught up) stops counting after writeMemory.
func (r *Reconciler) cacheBehind(key client.ObjectKey, bundleKey string, cached *fleet.BundleDeployment) bool {
	v, ok := r.written.Load(key)
	if !ok {
		return false
	}
	w := v.(writtenAt)
	if w.Bundle != bundleKey {
		// Another bundle of the same name wrote it (see nameFree): not a
		// write of ours the cache has yet to show.
		return false
	}
	if time.Since(w.At) < writeMemory {
		if cached == nil && w.Created {
			return true
		}
		// The same object (not one re-created meanwhile) at an older generation.
		if cached != nil && w.UID == cached.UID && cached.Generation < w.Generation {
			return true
		}
	}
	r.written.Delete(key)
	return false
}

// writeMemory bounds how long a write this reconciler made is expected to
// show up in the cache.
const writeMemory = 30 * time.Second

// writtenAt identifies the version of a deployment this reconciler wrote.
type writtenAt struct {
	UID        types.UID
	Generation int64
	// Created is set when the write was the deployment's creation.
	Created bool
	// Bundle is the writing bundle's namespace/name.
	Bundle string
	At     time.Time
}

// recordWrite remembers a write of bd for this reconciler's stale-cache
// check and, when the content API runs in this process, for its answer to
// an agent that saw bd before the cache did (Options.Published).
func (r *Reconciler) recordWrite(bd *fleet.BundleDeployment, created bool) {
	key := client.ObjectKeyFromObject(bd)
	r.written.Store(key, writtenAt{UID: bd.UID, Generation: bd.Generation, Created: created, At: time.Now(),
		Bundle: bd.Labels[fleet.BundleNamespaceLabel] + "/" + bd.Labels[fleet.BundleLabel]})
	r.Opts.Published.Record(key, ContentsOf(bd))
}

// forgetWrite drops what recordWrite remembered of a deployment being
// deleted.
func (r *Reconciler) forgetWrite(key client.ObjectKey) {
	r.written.Delete(key)
	r.Opts.Published.Forget(key)
}

// putDeployment creates or updates bd unless the cache shows it as is.
// The cluster's agent is granted the Contents bd references first (grant
// before publish): it reads the Content as soon as it sees the deployment.
func (r *Reconciler) putDeployment(ctx context.Context, bd, cached *fleet.BundleDeployment) error {
	if cached != nil && maps.Equal(cached.Labels, bd.Labels) && equality.Semantic.DeepEqual(cached.Spec, bd.Spec) {
		return nil
	}
	if err := r.grantContents(ctx, bd.Namespace, ContentsOf(bd)); err != nil {
		return err
	}
	// The status may be the cache's own (planCopy): the API response is
	// decoded into bd, which must not write into the cache's memory. The
	// server ignores a status sent to the main resource anyway.
	shown := bd.Status
	bd.Status = fleet.BundleDeploymentStatus{}
	if cached == nil {
		if err := r.Create(ctx, bd); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return r.adopt(ctx, bd)
			}
			return fmt.Errorf("creating BundleDeployment %s/%s: %w", bd.Namespace, bd.Name, err)
		}
		r.recordWrite(bd, true)
		return nil
	}
	untracked(bd)
	if err := r.Update(ctx, bd); err != nil {
		bd.Status = shown // the Bundle summary still shows the last report
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return fmt.Errorf("BundleDeployment %s/%s changed meanwhile: %w", bd.Namespace, bd.Name, err)
		}
		return fmt.Errorf("updating BundleDeployment %s/%s: %w", bd.Namespace, bd.Name, err)
	}
	r.recordWrite(bd, false)
	return nil
}

// untracked makes an update of bd reset its managedFields: one empty entry
// clears them, and the API server tracks no field of an object that has
// none on later updates that are not server-side applies, its spec's or
// its status's. Tracking fields is about a fifth of the API server's CPU
// for each of the two writes a rollout makes per cluster, this update and
// the agent's status update (test/scale/apicost, docs/scale-history.md
// "Twenty-seventh pass"). Nothing reads a deployment's managedFields: the
// manager writes it whole and the agent writes its status whole. A
// creation is always tracked; the first update clears it.
func untracked(bd *fleet.BundleDeployment) {
	bd.ManagedFields = []metav1.ManagedFieldsEntry{{}}
}

// adopt handles a create refused because the deployment exists although
// this shard's cache does not show it. Usually the cache is behind, and
// the create event requeues the bundle. When the deployment carries
// another shard's label, its bundle has just moved to this shard: the
// deployment is updated in place (labels and spec), keeping what the agent
// deployed. Another bundle's deployment of the same name is an error.
func (r *Reconciler) adopt(ctx context.Context, bd *fleet.BundleDeployment) error {
	live := &fleet.BundleDeployment{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(bd), live); err != nil {
		return client.IgnoreNotFound(err)
	}
	if err := takenBy("BundleDeployment", live, bd.Labels[fleet.BundleNamespaceLabel], bd.Labels[fleet.BundleLabel]); err != nil {
		return err
	}
	if live.Labels[fleet.ShardLabel] == bd.Labels[fleet.ShardLabel] {
		return nil
	}
	bd.ResourceVersion = live.ResourceVersion
	untracked(bd)
	if err := r.Update(ctx, bd); err != nil {
		return fmt.Errorf("adopting BundleDeployment %s/%s from shard %q: %w", bd.Namespace, bd.Name, live.Labels[fleet.ShardLabel], err)
	}
	r.recordWrite(bd, false)
	return nil
}

// readValues reads the current values of a deployment from its Secret
// (uncached: Secrets are not watched by the manager).
func (r *Reconciler) readValues(ctx context.Context, bd *fleet.BundleDeployment) (map[string]interface{}, error) {
	if bd.Spec.ValuesHash == "" {
		return nil, nil
	}
	sec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: bd.Namespace, Name: bd.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	var v map[string]interface{}
	if len(sec.Data[ValuesKey]) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(sec.Data[ValuesKey], &v); err != nil {
		return nil, fmt.Errorf("values Secret %s/%s: %w", bd.Namespace, bd.Name, err)
	}
	return v, nil
}

// writeValues stores current and staged values in the Secret named like the
// deployment and returns the hash of the current values. Without any values
// the Secret is removed.
func (r *Reconciler) writeValues(ctx context.Context, b *fleet.Bundle, bd *fleet.BundleDeployment, current, staged map[string]interface{}, cached *fleet.BundleDeployment) (string, error) {
	cur, err := valuesJSON(current)
	if err != nil {
		return "", err
	}
	stg, err := valuesJSON(staged)
	if err != nil {
		return "", err
	}
	key := client.ObjectKey{Namespace: bd.Namespace, Name: bd.Name}
	if cur == nil && stg == nil {
		if cached != nil && cached.Spec.ValuesHash != "" {
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
			if err := r.Delete(ctx, sec); err != nil && !apierrors.IsNotFound(err) {
				return "", err
			}
		}
		return "", nil
	}
	lbls := map[string]string{
		fleet.BundleLabel:             b.Name,
		fleet.BundleNamespaceLabel:    b.Namespace,
		fleet.ManagedLabel:            "true",
		fleet.BundleInternalSecretLbl: "true",
	}
	data := map[string][]byte{}
	if cur != nil {
		data[ValuesKey] = cur
	}
	if stg != nil {
		data[StagedValuesKey] = stg
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: lbls},
		Type:       corev1.SecretType(fleet.SecretTypeBundleDeploymentOptions),
		Data:       data,
	}
	err = r.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		existing := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, key, existing); err != nil {
			return "", err
		}
		if err := takenBy("values Secret", existing, b.Namespace, b.Name); err != nil {
			return "", err
		}
		existing.Labels = lbls
		existing.Data = data
		err = r.Update(ctx, existing)
	}
	if err != nil {
		return "", fmt.Errorf("writing values Secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	return ValuesHash(cur), nil
}

// holdOffSchedule adds to keep the deployments no longer targeted whose
// cluster is off schedule now: deleting one would make that cluster's agent
// uninstall the release outside its maintenance window. Unlike Fleet, which
// decides by the deployment's own spec.offSchedule (no longer refreshed
// once the cluster is not targeted, so such a deployment stays until its
// Bundle is deleted), the cluster's status decides here: they go once a
// window opens (the Cluster's flip requeues every bundle with a deployment
// there, see enqueueForCluster) or with their Bundle (finalize deletes
// them all).
func (r *Reconciler) holdOffSchedule(ctx context.Context, existing map[string]*fleet.BundleDeployment, keep map[string]bool) error {
	for ns := range existing {
		if keep[ns] {
			continue
		}
		off, err := r.namespaceOffSchedule(ctx, ns)
		if err != nil {
			return err
		}
		if off {
			keep[ns] = true
		}
	}
	return nil
}

// namespaceOffSchedule reports whether the cluster whose namespace is ns
// is off schedule, from the cache; false when no cluster has it (deleted).
func (r *Reconciler) namespaceOffSchedule(ctx context.Context, ns string) (bool, error) {
	clusters := &fleet.ClusterList{}
	// Only read: no copies.
	if err := r.List(ctx, clusters, client.MatchingFields{IndexClusterNamespace: ns}, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("reading the cluster of namespace %s: %w", ns, err)
	}
	for i := range clusters.Items {
		if OffSchedule(&clusters.Items[i]) {
			return true, nil
		}
	}
	return false, nil
}
