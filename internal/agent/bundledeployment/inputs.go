package bundledeployment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/manifest"
)

type unstructuredObj = unstructured.Unstructured

// options returns the BundleDeployment options with the Helm values put
// back from the values Secret (contract: Secret named like the
// BundleDeployment, key "values", sha256 = spec.valuesHash). It is a GET,
// not a cached list: the agent never caches Secrets upstream.
func (r *Reconciler) options(ctx context.Context, bd *fleet.BundleDeployment) (fleet.BundleDeploymentOptions, error) {
	opts := *bd.Spec.Options.DeepCopy()
	if bd.Spec.ValuesHash == "" {
		return opts, nil
	}
	s := &corev1.Secret{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(bd), s); err != nil {
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
// backoff (seconds) takes over.
func (r *Reconciler) manifest(ctx context.Context, bd *fleet.BundleDeployment) (*manifest.Manifest, error) {
	id := manifest.ManifestIDOf(bd.Spec.DeploymentID)
	var content []byte
	err := RetryFreshContent(ctx, func() error {
		var err error
		content, _, err = r.contents.Get(ctx, bd.Namespace, id, bd.Name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading content %s: %w", id, err)
	}
	m, err := manifest.FromCompressed(content)
	if err != nil {
		return nil, fmt.Errorf("%w: content %s: %v", deployer.ErrRender, id, err)
	}
	return m, nil
}

// copyDownstreamResources copies the Secrets/ConfigMaps named in
// downstreamResources from the cluster namespace upstream into the release
// namespace downstream, labelled with the BundleDeployment.
func (r *Reconciler) copyDownstreamResources(ctx context.Context, bd *fleet.BundleDeployment, opts fleet.BundleDeploymentOptions) error {
	if len(opts.DownstreamResources) == 0 {
		return nil
	}
	cs, err := kubernetes.NewForConfig(r.opts.Downstream)
	if err != nil {
		return err
	}
	ns := deployer.ReleaseNamespace(opts)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) && opts.AllowedTargetNamespaceSelector == nil {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: opts.NamespaceLabels, Annotations: opts.NamespaceAnnotations,
		}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{fleet.BundleDeploymentLabel: bd.Name}}
	}
	for _, dr := range opts.DownstreamResources {
		key := types.NamespacedName{Namespace: bd.Namespace, Name: dr.Name}
		switch strings.ToLower(dr.Kind) {
		case "secret":
			src := &corev1.Secret{}
			if err := r.apiReader.Get(ctx, key, src); err != nil {
				return fmt.Errorf("downstreamResources: secret %s: %w", dr.Name, err)
			}
			dst := &corev1.Secret{ObjectMeta: meta(dr.Name), Type: src.Type, Data: src.Data}
			_, err = cs.CoreV1().Secrets(ns).Update(ctx, dst, metav1.UpdateOptions{})
			if apierrors.IsNotFound(err) {
				_, err = cs.CoreV1().Secrets(ns).Create(ctx, dst, metav1.CreateOptions{})
			}
		case "configmap":
			src := &corev1.ConfigMap{}
			if err := r.apiReader.Get(ctx, key, src); err != nil {
				return fmt.Errorf("downstreamResources: configmap %s: %w", dr.Name, err)
			}
			dst := &corev1.ConfigMap{ObjectMeta: meta(dr.Name), Data: src.Data, BinaryData: src.BinaryData}
			_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, dst, metav1.UpdateOptions{})
			if apierrors.IsNotFound(err) {
				_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, dst, metav1.CreateOptions{})
			}
		default:
			return fmt.Errorf("%w: downstreamResources: unsupported kind %q", deployer.ErrRender, dr.Kind)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// dependenciesReady checks dependsOn against the BundleDeployments of the
// same cluster (from the cache: no API call).
func (r *Reconciler) dependenciesReady(ctx context.Context, bd *fleet.BundleDeployment) (bool, string) {
	for _, dep := range bd.Spec.DependsOn {
		var sel labels.Selector
		switch {
		case dep.Name != "":
			sel = labels.SelectorFromSet(labels.Set{
				fleet.BundleLabel:          dep.Name,
				fleet.BundleNamespaceLabel: bd.Labels[fleet.BundleNamespaceLabel],
			})
		case dep.Selector != nil:
			s, err := metav1.LabelSelectorAsSelector(dep.Selector)
			if err != nil {
				return false, fmt.Sprintf("invalid dependsOn selector: %v", err)
			}
			sel = s
		default:
			continue
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
			if what == "" {
				what = sel.String()
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
// meanwhile.
func (r *Reconciler) collect(ctx context.Context) error {
	refs, err := r.deployer.Releases(ctx)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if ref.BundleDeployment == "" {
			continue
		}
		key := types.NamespacedName{Namespace: r.opts.ClusterNamespace, Name: ref.BundleDeployment}
		if err := r.collectRelease(ctx, key, ref); err != nil {
			return err
		}
	}
	return nil
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
	// The namespace is left alone: the BundleDeployment may deploy into
	// it still, and moving a release is no deletion of the bundle.
	return r.deployer.Uninstall(ctx, deployer.UninstallInput{
		ReleaseName: ref.Name, Namespace: ref.Namespace, KeepResources: ref.KeepResources,
	})
}

// supersedes reports whether bd, which exists, has replaced the release ref
// it labels: bd claims another release (helm.releaseName or namespace
// changed), and this agent has deployed bd's current deploymentID as that
// release. Until then (a deploy failing, paused, an agent that has not
// reconciled bd since it started) the old release stays.
func (r *Reconciler) supersedes(bd *fleet.BundleDeployment, ref deployer.ReleaseRef) bool {
	if bd.Name != ref.BundleDeployment || bd.DeletionTimestamp != nil || bd.Spec.Paused {
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
