package deployer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// ensureNamespace creates the release namespace (unless createNamespace is
// false) and sets namespaceLabels/Annotations, as the deploying identity.
func (d *Deployer) ensureNamespace(ctx context.Context, g *restGetter, ns string, opts fleet.BundleDeploymentOptions) error {
	cfg, _ := g.ToRESTConfig()
	// Only the core client: a whole clientset per deploy is ~50 REST
	// clients of garbage.
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return ensureNamespaceWith(ctx, core, ns, opts)
}

// ensureNamespaceWith is ensureNamespace with the core client of the
// deploying identity.
func ensureNamespaceWith(ctx context.Context, core corev1client.CoreV1Interface, ns string, opts fleet.BundleDeploymentOptions) error {
	cur, err := core.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if opts.CreateNamespace != nil && !*opts.CreateNamespace {
			return fmt.Errorf("namespace %q does not exist and createNamespace is false", ns)
		}
		if opts.AllowedTargetNamespaceSelector != nil {
			// Deleted since CheckTargetNamespace: never create it.
			return fmt.Errorf("target namespace %q does not exist; allowedTargetNamespaceSelector forbids creating it", ns)
		}
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: opts.NamespaceLabels, Annotations: opts.NamespaceAnnotations,
		}}
		_, err = core.Namespaces().Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if !missing(cur.Labels, opts.NamespaceLabels) && !missing(cur.Annotations, opts.NamespaceAnnotations) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": opts.NamespaceLabels, "annotations": opts.NamespaceAnnotations,
	}})
	if err != nil {
		return err
	}
	_, err = core.Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	return err
}

func missing(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return true
		}
	}
	return false
}

// coreAs is the core API client of sa, a resolved service account (see
// serviceAccount): the agent's own when empty.
func (d *Deployer) coreAs(sa string) (corev1client.CoreV1Interface, error) {
	if sa == "" {
		return d.core, nil
	}
	return corev1client.NewForConfig(d.restConfigFor(sa))
}

// identity names sa, a resolved service account, in messages.
func (d *Deployer) identity(sa string) string {
	if sa == "" {
		return "the agent's own identity"
	}
	return "system:serviceaccount:" + d.agentNamespace + ":" + sa
}

// CoreFor is the core API client of the identity a bundle naming
// serviceAccount deploys with, resolved as Deploy resolves it: that
// account, else DefaultServiceAccount if it exists, else the agent's own
// identity. What the agent does downstream for a bundle besides its
// release (copies of downstreamResources, and their removal) goes through
// it, so that the bundle can do no more there than its release could.
func (d *Deployer) CoreFor(ctx context.Context, serviceAccount string) (corev1client.CoreV1Interface, error) {
	sa, err := d.serviceAccount(ctx, serviceAccount)
	if err != nil {
		return nil, err
	}
	return d.coreAs(sa)
}

// AgentCore is the core API client of the agent's own identity. It is only
// for finding what the agent made (label-selected lists of its copies of
// downstreamResources); writes done for a bundle use CoreFor.
func (d *Deployer) AgentCore() corev1client.CoreV1Interface { return d.core }

// PrepareNamespace makes sure the release namespace of opts exists, as the
// identity the bundle deploys with and under the same rules as Deploy
// (not created when createNamespace is false or allowedTargetNamespaceSelector
// is set; namespaceLabels/Annotations applied), and returns that identity's
// core client. It is for what must be in the namespace before the release
// (downstreamResources). The check it passed is remembered like Deploy's
// own, so the Deploy that follows does not read the namespace again.
func (d *Deployer) PrepareNamespace(ctx context.Context, opts fleet.BundleDeploymentOptions) (corev1client.CoreV1Interface, error) {
	sa, err := d.serviceAccount(ctx, opts.ServiceAccount)
	if err != nil {
		return nil, err
	}
	core, err := d.coreAs(sa)
	if err != nil {
		return nil, err
	}
	ns := ReleaseNamespace(opts)
	if err := ensureNamespaceWith(ctx, core, ns, opts); err != nil {
		return nil, err
	}
	d.namespaces.put(namespaceKey(sa, ns, opts), struct{}{})
	return core, nil
}

type serviceAccountKey struct{}

// WithServiceAccount returns ctx carrying the serviceAccount a bundle
// names (empty for none). Deploy reads valuesFrom ConfigMaps and Secrets
// as the identity the bundle deploys with, which it resolves from this
// name: a bundle must not read, through valuesFrom, what its account may
// not read. Without it valuesFrom is read as for a bundle that names no
// account (DefaultServiceAccount if it exists, else the agent), so a
// caller deploying bundles with a serviceAccount must pass it.
func WithServiceAccount(ctx context.Context, serviceAccount string) context.Context {
	return context.WithValue(ctx, serviceAccountKey{}, serviceAccount)
}

func serviceAccountFrom(ctx context.Context) string {
	sa, _ := ctx.Value(serviceAccountKey{}).(string)
	return sa
}

// applyCRDs server-side applies the bundle's CRDs, already marked as owned
// by the release so Helm adopts them, and waits until they serve; then it
// refreshes discovery so the custom resources in the same bundle map.
//
// A CRD another Helm release owns is taken over only with takeOwnership,
// as Helm does for every other object: two bundles shipping the same CRD
// would otherwise pass it back and forth, and uninstalling either would
// delete it, with every custom resource of it, under the other. A CRD
// that exists without Helm's ownership (installed by hand) is adopted, as
// before.
func applyCRDs(ctx context.Context, g *restGetter, crds []*unstructured.Unstructured, release, ns string, takeOwnership bool) error {
	cfg, _ := g.ToRESTConfig()
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	res := dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, crd := range crds {
		if !takeOwnership {
			live, err := res.Get(ctx, crd.GetName(), metav1.GetOptions{})
			switch {
			case err == nil:
				a := live.GetAnnotations()
				if owner, ons := a["meta.helm.sh/release-name"], a["meta.helm.sh/release-namespace"]; owner != "" && (owner != release || ons != ns) {
					return fmt.Errorf("CRD %s exists and belongs to release %s/%s; set helm.takeOwnership to adopt it", crd.GetName(), ons, owner)
				}
			case !apierrors.IsNotFound(err):
				return fmt.Errorf("reading CRD %s: %w", crd.GetName(), err)
			}
		}
		o := crd.DeepCopy()
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["app.kubernetes.io/managed-by"] = "Helm"
		o.SetLabels(labels)
		ann := o.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["meta.helm.sh/release-name"] = release
		ann["meta.helm.sh/release-namespace"] = ns
		o.SetAnnotations(ann)
		data, err := json.Marshal(o.Object)
		if err != nil {
			return err
		}
		if _, err := res.Patch(ctx, o.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptrTrue()}); err != nil {
			return fmt.Errorf("creating CRD %s: %w", o.GetName(), err)
		}
	}
	for _, crd := range crds {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			live, err := res.Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", crd.GetName(), err)
		}
	}
	g.reset()
	return nil
}

func ptrTrue() *bool { b := true; return &b }

// values starts from helm.values and merges each valuesFrom (read
// downstream, in order) over it, as Rancher Fleet does: values kept in the
// cluster override the bundle's. The ConfigMaps and Secrets are read as
// the identity the bundle deploys with (see WithServiceAccount). It also
// returns the strings no message may quote (see redactValues): every
// string of a valuesFrom Secret, and those of helm.values and valuesFrom
// ConfigMaps under a key that names a credential (appendSensitive).
func (d *Deployer) values(ctx context.Context, releaseNS string, h *fleet.HelmOptions) (map[string]any, []string, error) {
	out := map[string]any{}
	var sensitive []string
	if h.Values != nil && h.Values.Data != nil {
		// A deep copy through JSON: merging must not change the options.
		b, err := json.Marshal(h.Values.Data)
		if err != nil {
			return nil, nil, err
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, nil, err
		}
		sensitive = appendSensitive(sensitive, out, false)
	}
	if len(h.ValuesFrom) == 0 {
		return out, sensitive, nil
	}
	core, err := d.CoreFor(ctx, serviceAccountFrom(ctx))
	if err != nil {
		return nil, nil, err
	}
	for _, vf := range h.ValuesFrom {
		var raw string
		fromSecret := false
		switch {
		case vf.ConfigMapKeyRef != nil:
			ref := vf.ConfigMapKeyRef
			ns, key := orDefault(ref.Namespace, releaseNS), orDefault(ref.Key, "values.yaml")
			cm, err := core.ConfigMaps(ns).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, nil, fmt.Errorf("valuesFrom configmap %s: %w", ref.Name, err)
			}
			v, ok := cm.Data[key]
			if !ok {
				// As in Rancher Fleet: a typo must not deploy the chart's
				// defaults and report Ready.
				return nil, nil, missingKey(key, "configmap", ns, ref.Name)
			}
			raw = v
		case vf.SecretKeyRef != nil:
			ref := vf.SecretKeyRef
			if orDefault(ref.Namespace, releaseNS) == d.agentNamespace && ref.Name == SigningKeySecret {
				// With it a bundle could sign release storage as the agent.
				return nil, nil, fmt.Errorf("%w: valuesFrom secret %s: the agent's release signing key is not a values source", ErrRender, ref.Name)
			}
			ns, key := orDefault(ref.Namespace, releaseNS), orDefault(ref.Key, "values.yaml")
			s, err := core.Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, nil, fmt.Errorf("valuesFrom secret %s: %w", ref.Name, err)
			}
			v, ok := s.Data[key]
			if !ok {
				return nil, nil, missingKey(key, "secret", ns, ref.Name)
			}
			raw = string(v)
			fromSecret = true
		default:
			continue
		}
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(raw), &m); err != nil {
			if fromSecret {
				// The parser's message may quote the Secret's content.
				return nil, nil, fmt.Errorf("%w: valuesFrom secret %s: key %q is not valid YAML", ErrRender, vf.SecretKeyRef.Name, orDefault(vf.SecretKeyRef.Key, "values.yaml"))
			}
			return nil, nil, fmt.Errorf("%w: valuesFrom: invalid YAML: %v", ErrRender, err)
		}
		if fromSecret {
			sensitive = appendStrings(sensitive, m)
		} else {
			sensitive = appendSensitive(sensitive, m, false)
		}
		out = mergeValues(out, m)
	}
	return out, sensitive, nil
}

// ReleaseOwner is the BundleDeployment other than bdName that the release
// bdName's options name (ReleaseName in ReleaseNamespace) belongs to: the
// one its latest revision records (see otherOwner); empty when there is no
// such release or it is bdName's. The name may be a storage label cut to
// fit (see IsOwnerName). It is one list of the release's storage, read as
// the agent's own identity before anything is written, so that the caller
// can refuse the deploy, or let it take the release over from an owner
// that is gone, before it prepares the namespace.
func (d *Deployer) ReleaseOwner(ctx context.Context, bdName string, opts fleet.BundleDeploymentOptions) (string, error) {
	ns, name := ReleaseNamespace(opts), ReleaseName(bdName, opts)
	sig, err := d.signer(ctx)
	if err != nil {
		return "", err
	}
	// Only what the agent signed counts, as in Deploy (releaseStore).
	store := newReleaseStore(newReleaseSecrets(d.core.Secrets(ns)))
	store.sig, store.namespace = sig, ns
	store.SetLogger(slog.DiscardHandler)
	last, err := d.lastRelease(&action.Configuration{Releases: storage.Init(store)}, name)
	if err != nil {
		return "", fmt.Errorf("reading release %s/%s: %w", ns, name, err)
	}
	return otherOwner(last, bdName), nil
}

// IsOwnerName reports whether owner, a name ReleaseOwner or a
// ReleaseOwnedError gives, may be BundleDeployment bdName: the same name,
// or bdName cut to fit a storage label (a release stored without the full
// name in its chart). Callers that look for a live owner must take either
// as that owner, never decide it is gone because a cut name is not found.
func IsOwnerName(owner, bdName string) bool {
	return owner != "" && (owner == bdName || owner == names.Limit(bdName, maxLabelValue))
}

// missingKey is the error for a valuesFrom object that exists but lacks
// the key, worded as Rancher Fleet's. It names the key, never a value. It is
// not ErrRender: filling the key downstream fixes it on the next retry.
func missingKey(key, kind, ns, name string) error {
	return fmt.Errorf("key %q is missing from %s %s/%s, can't use it in valuesFrom", key, kind, ns, name)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// mergeValues deep-merges b over a.
func mergeValues(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// UninstallInput names a release to remove.
type UninstallInput struct {
	ReleaseName, Namespace string
	// ServiceAccount is the bundle's serviceAccount, used only for a
	// release that does not record the one it was deployed with (see
	// Uninstall).
	ServiceAccount string
	// BundleDeployment, when set, is the BundleDeployment the release is
	// removed for: a release whose latest revision records another one
	// is left alone and Uninstall returns nil. A bundle refused because
	// its releaseName is another's (ReleaseOwnedError) owns nothing
	// there, and removing it must not uninstall the other's release.
	BundleDeployment string
	// KeepResources removes only the release history, leaving the objects.
	KeepResources bool
	// DeleteNamespace deletes the release namespace afterwards, as the
	// identity that removed the release, unless KeepResources (deleting
	// it would delete the objects just kept), it is a system namespace or
	// the agent's own, or another Helm release is still stored in it.
	DeleteNamespace bool
}

// Uninstall removes a release; a release that does not exist is fine.
//
// It acts as the identity that deployed the release, which Deploy records
// on the release's chart (annotation fleet.cattle.io/service-account,
// resolved as Deploy resolves it: empty is DefaultServiceAccount if that
// exists, else the agent), so that removing a bundle, also after a restart
// or in garbage collection, can do no more than deploying it could. What
// that identity may not do fails the uninstall: the release stays stored
// and the caller retries; the agent never falls back to its own identity.
// Objects Helm leaves because the identity may not even read them fail
// it too, after the release is gone, so that the error is seen.
//
// Only revisions the agent wrote are read: what it deletes and the hooks
// it runs are those of the latest of them. Storage Secrets of the release
// it cannot verify are deleted with it, and nothing they list.
func (d *Deployer) Uninstall(ctx context.Context, in UninstallInput) error {
	// Under the release's lock, as deploys and drift corrections: the
	// owner check below must not race a deploy taking the release over.
	unlock, err := d.lockRelease(ctx, in.Namespace, in.ReleaseName)
	if err != nil {
		return err
	}
	defer unlock()
	sa, foreign, err := d.releaseServiceAccount(ctx, in)
	if err != nil || foreign {
		return err
	}
	ac, _, err := d.actionConfig(ctx, in.Namespace, sa)
	if err != nil {
		return err
	}
	if in.KeepResources {
		if err := purgeHistory(ac, in.ReleaseName); err != nil {
			return fmt.Errorf("removing the history of release %s/%s as %s: %w", in.Namespace, in.ReleaseName, d.identity(sa), err)
		}
	} else {
		// Helm only logs why a delete failed; keep it for the error.
		var deletes *deleteErrors
		if kc, ok := ac.KubeClient.(*kube.Client); ok {
			deletes = &deleteErrors{Client: kc}
			ac.KubeClient = deletes
		}
		u := action.NewUninstall(ac)
		u.IgnoreNotFound = true
		u.WaitStrategy = kube.HookOnlyStrategy
		u.Timeout = 5 * time.Minute
		res, err := u.Run(in.ReleaseName)
		if err != nil && !strings.Contains(err.Error(), "not found") {
			if deletes != nil && len(deletes.errs) > 0 {
				err = fmt.Errorf("%w: %w", err, errors.Join(deletes.errs...))
			}
			return fmt.Errorf("uninstalling release %s/%s as %s: %w", in.Namespace, in.ReleaseName, d.identity(sa), err)
		}
		if err == nil && res != nil && strings.Contains(res.Info, "ownership could not be verified") {
			d.deployed.forget(releaseKey(in.Namespace, in.ReleaseName))
			return fmt.Errorf("uninstalled release %s/%s as %s, which left objects it could not read: %s",
				in.Namespace, in.ReleaseName, d.identity(sa), strings.TrimSpace(res.Info))
		}
	}
	if err := purgeLeftovers(ctx, ac, in.ReleaseName); err != nil {
		return err
	}
	d.deployed.forget(releaseKey(in.Namespace, in.ReleaseName))
	if !in.DeleteNamespace || in.KeepResources || d.protectedNamespace(in.Namespace) {
		return nil
	}
	others, err := d.otherReleases(ctx, in.Namespace, in.ReleaseName)
	if err != nil || others {
		// Not knowing is not "empty": the namespace stays.
		return err
	}
	// The next deploy into it must not trust an old check.
	d.namespaces.clear()
	return d.deleteNamespace(ctx, in, sa)
}

// deleteNamespace deletes the release namespace for deleteNamespace as sa,
// the identity that deployed the release and just removed it (the agent's
// own only when that is how the release deployed), so that a bundle whose
// serviceAccount may not delete namespaces cannot have the agent delete one
// for it (Rancher deletes it as the agent). A refusal or failure is
// returned and recorded as a Warning Event on the kept namespace (see
// warnNamespaceKept): the release is gone by then, so the retry it causes
// finds nothing to remove and stops.
func (d *Deployer) deleteNamespace(ctx context.Context, in UninstallInput, sa string) error {
	core, err := d.coreAs(sa)
	if err != nil {
		return err
	}
	err = core.Namespaces().Delete(ctx, in.Namespace, metav1.DeleteOptions{})
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	why := fmt.Sprintf("deleting namespace %s failed for %s", in.Namespace, d.identity(sa))
	if apierrors.IsForbidden(err) {
		why = fmt.Sprintf("deleteNamespace is forbidden for %s", d.identity(sa))
	}
	d.warnNamespaceKept(ctx, in.Namespace, fmt.Sprintf("release %s uninstalled, namespace kept: %s", in.ReleaseName, why))
	return fmt.Errorf("release %s/%s uninstalled, namespace %s kept: %s: %w",
		in.Namespace, in.ReleaseName, in.Namespace, why, err)
}

// deleteErrors is Helm's client, keeping the errors of its deletes.
type deleteErrors struct {
	*kube.Client
	errs []error
}

func (c *deleteErrors) Delete(resources kube.ResourceList, policy metav1.DeletionPropagation) (*kube.Result, []error) {
	res, errs := c.Client.Delete(resources, policy)
	c.errs = append(c.errs, errs...)
	return res, errs
}

// releaseServiceAccount resolves the identity that removes a release: the
// serviceAccount its latest revision records, read with the agent's own
// identity (in.ServiceAccount for a release that records none), resolved
// as Deploy resolves it. foreign reports a release that latest revision
// records for another BundleDeployment than in.BundleDeployment (when
// set), which must not be removed.
func (d *Deployer) releaseServiceAccount(ctx context.Context, in UninstallInput) (sa string, foreign bool, err error) {
	name := in.ServiceAccount
	ac, _, err := d.actionConfig(ctx, in.Namespace, "")
	if err != nil {
		return "", false, err
	}
	last, err := d.lastRelease(ac, in.ReleaseName)
	if err != nil {
		return "", false, fmt.Errorf("reading release %s/%s: %w", in.Namespace, in.ReleaseName, err)
	}
	if in.BundleDeployment != "" && otherOwner(last, in.BundleDeployment) != "" {
		return "", true, nil
	}
	if last != nil && last.Chart != nil && last.Chart.Metadata != nil {
		if sa, ok := last.Chart.Metadata.Annotations[fleet.ServiceAccountAnnotation]; ok {
			name = sa
		}
	}
	sa, err = d.serviceAccount(ctx, name)
	return sa, false, err
}

// protectedNamespace is a namespace deleteNamespace never deletes: default,
// kube-*, Fleet's system namespace and the agent's own.
func (d *Deployer) protectedNamespace(ns string) bool {
	return ns == "default" || strings.HasPrefix(ns, "kube-") || ns == fleet.DefaultSystemNamespace ||
		ns == d.agentNamespace
}

// otherReleases reports whether ns still stores a Helm release other than
// release (this agent's or anyone's): deleting the namespace would delete
// what it deployed.
func (d *Deployer) otherReleases(ctx context.Context, ns, release string) (bool, error) {
	list, err := d.core.Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		return false, fmt.Errorf("listing Helm releases in namespace %s before deleting it: %w", ns, err)
	}
	for _, s := range list.Items {
		if s.Labels["name"] != release {
			return true, nil
		}
	}
	return false, nil
}

// IsRenderError reports bad bundle content, which retrying does not fix.
func IsRenderError(err error) bool {
	return errors.Is(err, ErrRender) || errors.Is(err, ErrNamespace)
}
