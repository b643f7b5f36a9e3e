package bundledeployment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/manifest"
)

type unstructuredObj = unstructured.Unstructured

// options returns bd's options with the Helm values put back from its
// values Secret (ReadOptions). It is a GET, not a cached list: the agent
// never caches Secrets upstream.
func (r *Reconciler) options(ctx context.Context, bd *fleet.BundleDeployment) (fleet.BundleDeploymentOptions, error) {
	return ReadOptions(ctx, bd, func(s *corev1.Secret) error {
		return r.apiReader.Get(ctx, client.ObjectKeyFromObject(bd), s)
	})
}

// ReadOptions returns bd's options with the Helm values put back from the
// values Secret (contract: Secret named like the BundleDeployment in its
// namespace, key "values", sha256 = spec.valuesHash), which get reads. A
// read that failed because the API server is overloaded or unreachable is
// a *ContentUnavailableError (KindValuesSecret), waited for as a Content
// is; a Secret missing, forbidden, not matching the hash yet or not JSON
// is an error the caller backs off from. The real and the simulated agents
// both read values through it.
func ReadOptions(ctx context.Context, bd *fleet.BundleDeployment, get func(*corev1.Secret) error) (fleet.BundleDeploymentOptions, error) {
	opts := *bd.Spec.Options.DeepCopy()
	if bd.Spec.ValuesHash == "" {
		return opts, nil
	}
	s := &corev1.Secret{}
	if err := get(s); err != nil {
		if unavailable := asUnavailable(ctx, KindValuesSecret, bd.Name, err); unavailable != nil {
			return opts, unavailable
		}
		return opts, fmt.Errorf("reading values secret %s: %w", bd.Name, err)
	}
	raw := s.Data["values"]
	d := sha256.Sum256(raw)
	if hex.EncodeToString(d[:]) != bd.Spec.ValuesHash {
		return opts, fmt.Errorf("values secret %s does not match valuesHash yet", bd.Name)
	}
	values := map[string]any{}
	if err := json.Unmarshal(raw, &values); err != nil {
		return opts, fmt.Errorf("values secret %s: invalid JSON: %w", bd.Name, err)
	}
	if opts.Helm == nil {
		opts.Helm = &fleet.HelmOptions{}
	}
	opts.Helm.Values = &fleet.GenericMap{Data: values}
	return opts, nil
}

// manifest reads the Content a deployment names through the content API
// (package contentapi), as seen from the deployment's namespace: the
// manager serves it only to that namespace's agent, and only while a
// deployment there references it. The agent may see a new deployment a
// moment before the manager does (or, without the content API, before the
// API server's authorizer sees the manager's grant), so a 403 or 404 is
// retried a few times quickly (0.1s, doubling) before the caller's general
// backoff (seconds) takes over. An overloaded or unreachable API server is
// a *ContentUnavailableError, which the caller retries shortly instead
// (see ReadManifest, waitUnavailable).
func (r *Reconciler) manifest(ctx context.Context, bd *fleet.BundleDeployment) (*manifest.Manifest, error) {
	return ReadManifest(ctx, r.contents, bd)
}

// takeOver decides whether bd may deploy its release when another
// BundleDeployment owns it (deployer.ReleaseOwner; "" and nil when none
// does). While the owner exists and is not being deleted, two live bundles
// share a releaseName in one namespace: the deploy is refused
// (deployer.ReleaseOwnedError), before anything is written. When the owner
// is gone or being deleted, the app moved to bd (a renamed GitRepo or
// bundle, a path moved to another GitRepo: the new bundle is created and
// the old pruned in the same sync), and bd takes the release over by
// upgrading it, as Rancher Fleet does: nothing is deleted and re-created.
// The owner is looked for among the cached BundleDeployments of the
// cluster namespace, by a name that may be cut (deployer.IsOwnerName): a
// cut name never makes a live owner look gone.
func (r *Reconciler) takeOver(ctx context.Context, bd *fleet.BundleDeployment, opts fleet.BundleDeploymentOptions) (string, error) {
	owner, err := r.deployer.ReleaseOwner(ctx, bd.Name, opts)
	if err != nil || owner == "" {
		return "", err
	}
	list := &fleet.BundleDeploymentList{}
	if err := r.client.List(ctx, list, client.InNamespace(bd.Namespace)); err != nil {
		return "", fmt.Errorf("listing bundledeployments to find the owner of release %s: %w", deployer.ReleaseName(bd.Name, opts), err)
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.Name != bd.Name && o.DeletionTimestamp == nil && deployer.IsOwnerName(owner, o.Name) {
			return "", &deployer.ReleaseOwnedError{
				Release: deployer.ReleaseName(bd.Name, opts), Namespace: deployer.ReleaseNamespace(opts), Owner: owner,
			}
		}
	}
	ctrl.LoggerFrom(ctx).Info("taking over release of a bundledeployment that is gone or being deleted",
		"release", deployer.ReleaseNamespace(opts)+"/"+deployer.ReleaseName(bd.Name, opts), "from", owner)
	return owner, nil
}

// noteRefused remembers whether the deploy of key was refused because a
// live BundleDeployment owns its release (err, the deploy's outcome), so
// that the owner's deletion retries it (wakeRefused).
func (r *Reconciler) noteRefused(key types.NamespacedName, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if owned := (*deployer.ReleaseOwnedError)(nil); errors.As(err, &owned) {
		r.refused[key] = owned.Owner
		return
	}
	delete(r.refused, key)
}

// wakeRefused retries at once, without their backoff, the deploys refused
// because BundleDeployment name owned their release: it is gone or being
// deleted, so they take the release over now, instead of up to 10 minutes
// later with the app removed meanwhile.
func (r *Reconciler) wakeRefused(name string) {
	var wake []types.NamespacedName
	r.mu.Lock()
	for key, owner := range r.refused {
		if deployer.IsOwnerName(owner, name) {
			wake = append(wake, key)
			delete(r.refused, key)
			delete(r.failures, key)
		}
	}
	r.mu.Unlock()
	for _, key := range wake {
		r.driftEvent(key)
	}
}

// claimedByOthers are those of refs (releases of the BundleDeployment key,
// which is gone) that another BundleDeployment of the cluster namespace,
// existing and not being deleted, claims: its helm.releaseName (or
// name) and namespace are the release's; and their namespaces. Its deploy
// takes the release over (see takeOver), so the clean-up must not
// uninstall it, whichever of the two the agent sees first.
func (r *Reconciler) claimedByOthers(ctx context.Context, key types.NamespacedName, refs []deployer.ReleaseRef) (
	claimed map[deployer.ReleaseRef]bool, namespaces map[string]bool, err error) {
	if len(refs) == 0 {
		return nil, nil, nil
	}
	list := &fleet.BundleDeploymentList{}
	if err := r.client.List(ctx, list, client.InNamespace(key.Namespace)); err != nil {
		return nil, nil, fmt.Errorf("listing bundledeployments before removing the releases of %s: %w", key.Name, err)
	}
	claimed, namespaces = map[deployer.ReleaseRef]bool{}, map[string]bool{}
	for i := range list.Items {
		o := &list.Items[i]
		if o.Name == key.Name || o.DeletionTimestamp != nil {
			continue
		}
		ns, name := deployer.ReleaseNamespace(o.Spec.Options), deployer.ReleaseName(o.Name, o.Spec.Options)
		for _, ref := range refs {
			if ref.Namespace == ns && ref.Name == name {
				claimed[ref], namespaces[ns] = true, true
			}
		}
	}
	return claimed, namespaces, nil
}

// dependenciesReady checks dependsOn against the BundleDeployments of the
// same cluster (from the cache: no API call).
func (r *Reconciler) dependenciesReady(ctx context.Context, bd *fleet.BundleDeployment) (bool, string) {
	for _, dep := range bd.Spec.DependsOn {
		if dep.Name == "" && dep.Selector == nil {
			continue
		}
		// With both a name and a selector, a dependency must match both:
		// the name is two more label requirements, as in Rancher Fleet.
		sel := labels.Everything()
		if dep.Selector != nil {
			s, err := metav1.LabelSelectorAsSelector(dep.Selector)
			if err != nil {
				return false, fmt.Sprintf("invalid dependsOn selector: %v", err)
			}
			sel = s
		}
		if dep.Name != "" {
			named, ok := labels.SelectorFromSet(labels.Set{
				fleet.BundleLabel:          dep.Name,
				fleet.BundleNamespaceLabel: bd.Labels[fleet.BundleNamespaceLabel],
			}).Requirements()
			if !ok {
				return false, fmt.Sprintf("invalid dependsOn name %q", dep.Name)
			}
			sel = sel.Add(named...)
		}
		list := &fleet.BundleDeploymentList{}
		if err := r.client.List(ctx, list, client.InNamespace(bd.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return false, fmt.Sprintf("listing dependencies: %v", err)
		}
		accepted := dep.AcceptedStates
		if len(accepted) == 0 {
			accepted = []fleet.BundleState{fleet.Ready}
		}
		found := false
		for i := range list.Items {
			d := &list.Items[i]
			if d.Name == bd.Name {
				continue
			}
			found = true
			if s := State(d); !slices.Contains(accepted, s) {
				return false, fmt.Sprintf("waiting for dependency %s (state %s)", d.Labels[fleet.BundleLabel], s)
			}
		}
		if !found {
			what := dep.Name
			switch {
			case dep.Selector == nil:
			case what == "":
				what = sel.String()
			default:
				what += " with selector " + metav1.FormatLabelSelector(dep.Selector)
			}
			return false, fmt.Sprintf("no bundle on this cluster matches dependency %s", what)
		}
	}
	return true, ""
}

// collector periodically uninstalls releases of this agent whose
// BundleDeployment no longer exists upstream (deleted while the agent was
// down, for example).
type collector struct {
	r        *Reconciler
	interval time.Duration
}

func (c *collector) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(jitter(c.interval)):
		}
		if err := c.r.collect(ctx); err != nil {
			ctrl.LoggerFrom(ctx).Info("release garbage collection failed", "error", err.Error())
		}
	}
}

// collect removes orphaned releases: those whose BundleDeployment is gone,
// and those their BundleDeployment no longer claims (its helm.releaseName
// or namespace changed) once it is deployed under the release it claims
// now. Only a NotFound from a direct GET upstream counts as gone: an
// unreachable manager never deletes anything. Each release is handled
// under its BundleDeployment's lock, so that no deploy of it runs
// meanwhile. A release that cannot be removed (its service account may
// not delete its objects) does not hold up the others. Only releases the
// agent wrote are listed (deployer.Releases verifies its signature on
// their storage): a storage Secret anyone else created, whatever
// BundleDeployment its labels name, is logged and left alone.
func (r *Reconciler) collect(ctx context.Context) error {
	refs, err := r.deployer.Releases(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, ref := range refs {
		if ref.Unresolved != "" {
			// Its BundleDeployment's name was cut to fit the label and
			// the release does not say the full one: looked up under
			// the cut name it would seem gone, and an uninstall could
			// remove what an existing BundleDeployment deployed.
			ctrl.LoggerFrom(ctx).Info("keeping release whose bundledeployment cannot be told: its storage label may be a cut name and its latest revision does not record the full one",
				"release", ref.Namespace+"/"+ref.Name, "label", ref.Unresolved)
			continue
		}
		if ref.BundleDeployment == "" {
			continue
		}
		key := types.NamespacedName{Namespace: r.opts.ClusterNamespace, Name: ref.BundleDeployment}
		errs = append(errs, r.collectRelease(ctx, key, ref))
	}
	return errors.Join(errs...)
}

func (r *Reconciler) collectRelease(ctx context.Context, key types.NamespacedName, ref deployer.ReleaseRef) error {
	unlock := r.lock(key)
	defer unlock()
	bd := &fleet.BundleDeployment{}
	err := r.apiReader.Get(ctx, key, bd)
	if apierrors.IsNotFound(err) {
		return r.cleanup(ctx, key)
	}
	if err != nil || !r.supersedes(bd, ref) {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("removing release its bundledeployment no longer claims",
		"bundledeployment", key.Name, "release", ref.Namespace+"/"+ref.Name)
	// Copies of downstreamResources go with the release when it leaves
	// their namespace (in the same namespace they are the new release's).
	if !ref.KeepResources && ref.Namespace != deployer.ReleaseNamespace(bd.Spec.Options) {
		if err := r.deleteCopies(ctx, key.Name, ref.Namespace, nil); err != nil {
			return err
		}
	}
	// The namespace is left alone: the BundleDeployment may deploy into
	// it still, and moving a release is no deletion of the bundle. The
	// release is removed as the identity that deployed it.
	return r.deployer.Uninstall(ctx, deployer.UninstallInput{
		ReleaseName: ref.Name, Namespace: ref.Namespace, KeepResources: ref.KeepResources,
		ServiceAccount: bd.Spec.Options.ServiceAccount, BundleDeployment: key.Name,
	})
}

// held reports whether the BundleDeployment is to be left as it is
// downstream: paused, or off schedule (its cluster's Schedule is outside
// its windows).
func held(bd *fleet.BundleDeployment) bool {
	return bd.Spec.Paused || bd.Spec.OffSchedule
}

// supersedes reports whether bd, which exists, has replaced the release ref
// it labels: bd claims another release (helm.releaseName or namespace
// changed), and this agent has deployed bd's current deploymentID as that
// release. Until then (a deploy failing, held, an agent that has not
// reconciled bd since it started) the old release stays.
func (r *Reconciler) supersedes(bd *fleet.BundleDeployment, ref deployer.ReleaseRef) bool {
	if bd.Name != ref.BundleDeployment || bd.DeletionTimestamp != nil || held(bd) {
		return false
	}
	ns, name := deployer.ReleaseNamespace(bd.Spec.Options), deployer.ReleaseName(bd.Name, bd.Spec.Options)
	if ref.Namespace == ns && ref.Name == name {
		return false
	}
	st := r.state(client.ObjectKeyFromObject(bd))
	if st == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return st.deploymentID == bd.Spec.DeploymentID && st.release != nil &&
		st.release.Namespace == ns && st.release.Name == name
}

// RetryFreshContent runs get, the read of a Content a BundleDeployment has
// just pointed at, up to 5 times while it fails with 403 or 404, waiting
// 0.1s, 0.2s, 0.4s, 0.8s in between: the manager grants before it
// publishes, but the API server's authorizer may lag a moment. The real
// agent and the simulated agents both read Contents through it.
func RetryFreshContent(ctx context.Context, get func() error) error {
	d := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := get()
		if err == nil || attempt == 5 || !(apierrors.IsForbidden(err) || apierrors.IsNotFound(err)) {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		d *= 2
	}
}
