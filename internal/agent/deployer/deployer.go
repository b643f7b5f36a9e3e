// Package deployer renders a bundle into a Helm chart and installs,
// upgrades, rolls back and uninstalls it downstream with the Helm v4 SDK.
// Release history is stored in Secrets in the release namespace, as Fleet
// does, so `helm list` shows Fleet's releases.
package deployer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/postrenderer"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/names"
)

// FieldManager is the server-side apply manager of everything the agent
// deploys (Helm's and the agent's own CRD pre-apply share it, so they never
// conflict with each other).
const FieldManager = "fleet-agent"

// Labels on Helm's release storage Secrets, so that garbage collection finds
// the agent's releases with one label-selected list.
const (
	StorageBundleIDLabel      = "fleet.cattle.io/bundle-id"
	StorageAgentNamespaceLbl  = "fleet.cattle.io/agent-namespace"
	StorageKeepResourcesLabel = "fleet.cattle.io/keep-resources"
	StorageDeleteNSLabel      = "fleet.cattle.io/delete-namespace"
)

// maxLabelValue is the longest label value Kubernetes accepts. A
// BundleDeployment name may be longer (up to 253): its StorageBundleIDLabel
// is then the name cut by names.Limit, and Releases reads the full name
// from the release's chart (fleet.BundleIDAnnotation).
const maxLabelValue = 63

// DeploymentIDAnnotation on a release's chart records the deploymentID it
// deployed. After a restart the agent compares it with the
// BundleDeployment's: a release found in storage is not necessarily the one
// the status names (the status write of a later deploy may have been lost).
// A rollback (drift correction) copies the chart, and with it the mark.
const DeploymentIDAnnotation = "fleet.cattle.io/deployment-id"

// DefaultMaxHistory is Fleet's default number of kept release revisions.
const DefaultMaxHistory = 2

// Deployer installs bundles into one downstream cluster.
type Deployer struct {
	config         *rest.Config
	agentNamespace string
	// core is the core API client of the agent's own identity: the only
	// API group the Deployer reads itself (a whole clientset would be
	// about 60 REST clients per agent, for the simulators per cluster).
	core      corev1client.CoreV1Interface
	discovery *Discovery

	// accounts (optional) watches the DefaultServiceAccount; defaultSA
	// and namespaces remember recent lookups (LookupMaxAge).
	accounts   *DefaultAccounts
	defaultSA  *recent[bool]
	namespaces *recent[struct{}]
	// deployed remembers the objects of each release's last manifest.
	deployed deployedObjects

	// keyMu guards sig, the key the agent signs its release storage with
	// (see trust.go), read or created on first use.
	keyMu sync.Mutex
	sig   *signer
	// verdicts remembers, for Releases, which storage Secrets (by
	// namespace/name and resourceVersion) the agent wrote.
	verdicts verdicts
	// releaseLocks serialize the actions on each release.
	releaseLocks releaseLocks
}

// Options configure a Deployer.
type Options struct {
	// Config is an admin config for the downstream cluster (the agent's own
	// identity there).
	Config *rest.Config
	// AgentNamespace is the agent's namespace downstream.
	AgentNamespace string
	// Discovery is the discovery cache to use; nil builds one for this
	// Deployer. Deployers of the same cluster (simulated agents) share one.
	Discovery *Discovery
	// DefaultAccounts, when set (and started), tells whether the
	// DefaultServiceAccount exists; nil looks it up per deploy, remembered
	// for LookupMaxAge.
	DefaultAccounts *DefaultAccounts
}

var setFieldManager sync.Once

// New returns a Deployer for the downstream cluster of config (an admin
// config: the agent's own identity there), with its own discovery cache.
func New(config *rest.Config, agentNamespace string) (*Deployer, error) {
	return NewWithOptions(Options{Config: config, AgentNamespace: agentNamespace})
}

// NewWithOptions returns a Deployer for o.Config.
func NewWithOptions(o Options) (*Deployer, error) {
	// Helm's field manager is a package variable: set it once, not from
	// every (possibly concurrent) constructor.
	setFieldManager.Do(func() { kube.ManagedFieldsManager = FieldManager })
	core, err := corev1client.NewForConfig(o.Config)
	if err != nil {
		return nil, err
	}
	disc := o.Discovery
	if disc == nil {
		if disc, err = NewDiscovery(o.Config); err != nil {
			return nil, err
		}
	}
	return &Deployer{
		config: rest.CopyConfig(o.Config), agentNamespace: o.AgentNamespace, core: core, discovery: disc,
		accounts:  o.DefaultAccounts,
		defaultSA: newRecent[bool](LookupMaxAge), namespaces: newRecent[struct{}](LookupMaxAge),
	}, nil
}

// Discovery is the Deployer's discovery cache, for other parts of the agent
// that map kinds of the same cluster (the drift watch).
func (d *Deployer) Discovery() *Discovery { return d.discovery }

// Input is one deployment of a BundleDeployment.
type Input struct {
	// Name is the BundleDeployment name (the bundle ID).
	Name         string
	DeploymentID string
	Commit       string
	// Options are the BundleDeployment options with the values from the
	// values Secret already merged into helm.values.
	Options  fleet.BundleDeploymentOptions
	Manifest *manifest.Manifest
	// TakeOver is the BundleDeployment, as ReleaseOwner named it, whose
	// release this deploy upgrades and records as its own. The caller
	// sets it only when that BundleDeployment is gone or being deleted
	// (an app moved to another bundle under the same helm.releaseName):
	// otherwise a release another BundleDeployment owns is refused
	// (ReleaseOwnedError).
	TakeOver string
}

// Release is a deployed release and its objects.
type Release struct {
	Name      string
	Namespace string
	Version   int
	// DeploymentID is the deploymentID the release deployed; empty for a
	// release stored before the agent recorded it.
	DeploymentID string
	// Objects are the post-rendered objects of the release, with their
	// namespaces resolved.
	Objects []*unstructured.Unstructured
}

// String is Fleet's "namespace/name:version".
func (r *Release) String() string {
	return fmt.Sprintf("%s/%s:%d", r.Namespace, r.Name, r.Version)
}

// ReleaseName is helm.releaseName, else the BundleDeployment name made into
// a valid release name (at most 53 characters).
func ReleaseName(bdName string, opts fleet.BundleDeploymentOptions) string {
	if opts.Helm != nil && opts.Helm.ReleaseName != "" {
		return opts.Helm.ReleaseName
	}
	return names.HelmReleaseName(bdName)
}

// ReleaseNamespace is `namespace`, else `defaultNamespace`, else "default".
func ReleaseNamespace(opts fleet.BundleDeploymentOptions) string {
	switch {
	case opts.TargetNamespace != "":
		return opts.TargetNamespace
	case opts.DefaultNamespace != "":
		return opts.DefaultNamespace
	}
	return "default"
}

// restConfigFor impersonates serviceAccount (in the agent namespace) when
// set, so a bundle can do only what that account may.
func (d *Deployer) restConfigFor(serviceAccount string) *rest.Config {
	cfg := rest.CopyConfig(d.config)
	if serviceAccount != "" {
		cfg.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + d.agentNamespace + ":" + serviceAccount,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + d.agentNamespace, "system:authenticated"},
		}
	}
	return cfg
}

// DefaultServiceAccount is impersonated when a bundle names no
// serviceAccount and it exists in the agent namespace (as in Fleet), so an
// operator can restrict what bundles may deploy on a cluster.
const DefaultServiceAccount = "fleet-default"

func (d *Deployer) serviceAccount(ctx context.Context, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	if exists, known := d.accounts.exists(d.agentNamespace); known {
		return defaultIf(exists), nil
	}
	if exists, ok := d.defaultSA.get(""); ok {
		return defaultIf(exists), nil
	}
	_, err := d.core.ServiceAccounts(d.agentNamespace).Get(ctx, DefaultServiceAccount, metav1.GetOptions{})
	switch {
	case err == nil:
		d.defaultSA.put("", true)
		return DefaultServiceAccount, nil
	case apierrors.IsNotFound(err):
		d.defaultSA.put("", false)
		return "", nil
	}
	// Not knowing is not "absent": deploying with the agent's own
	// identity could do more than the operator allowed.
	return "", fmt.Errorf("looking up ServiceAccount %s/%s: %w", d.agentNamespace, DefaultServiceAccount, err)
}

func defaultIf(exists bool) string {
	if exists {
		return DefaultServiceAccount
	}
	return ""
}

// namespaceKey identifies one ensureNamespace check: the deploying
// identity, the namespace and what the bundle asks of it.
func namespaceKey(serviceAccount, ns string, opts fleet.BundleDeploymentOptions) string {
	create := opts.CreateNamespace == nil || *opts.CreateNamespace
	return fmt.Sprintf("%s\x00%s\x00%v\x00%v\x00%v\x00%v", serviceAccount, ns, create,
		opts.AllowedTargetNamespaceSelector != nil, opts.NamespaceLabels, opts.NamespaceAnnotations)
}

// actionConfig is the Helm configuration of one action in namespace as
// serviceAccount (resolved; empty is the agent's own identity). Its
// storage shows Helm only the revisions the agent signed (releaseStore).
func (d *Deployer) actionConfig(ctx context.Context, namespace, serviceAccount string) (*action.Configuration, *restGetter, error) {
	return d.actionConfigOn(ctx, namespace, d.restConfigFor(serviceAccount))
}

// actionConfigOn is actionConfig with the REST config every request of
// the action (kube client and release storage alike) is made with.
func (d *Deployer) actionConfigOn(ctx context.Context, namespace string, restCfg *rest.Config) (*action.Configuration, *restGetter, error) {
	sig, err := d.signer(ctx)
	if err != nil {
		return nil, nil, err
	}
	getter := newRESTGetter(restCfg, namespace, d.discovery)
	ac := action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
	if err := ac.Init(getter, namespace, "secret"); err != nil {
		return nil, nil, err
	}
	if kc, ok := ac.KubeClient.(*kube.Client); ok {
		kc.Namespace = namespace
		kc.Factory = serverValidatedFactory{Factory: kc.Factory}
	}
	// Helm's Secrets storage, with the same (maybe impersonated)
	// credential, but each release listed once per action (releaseSecrets)
	// and its revisions written without a new gzip writer each
	// (releaseStore).
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return nil, nil, err
	}
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	store := newReleaseStore(newReleaseSecrets(core.Secrets(namespace)))
	store.sig, store.namespace = sig, namespace
	store.SetLogger(slog.DiscardHandler)
	ac.Releases = storage.Init(store)
	return ac, getter, nil
}

// ReleaseOwnedError is a deploy refused because its release (helm.releaseName
// in the release namespace) is stored for another BundleDeployment of this
// agent that still exists. Helm knows a release only by name: upgrading it
// would replace the other bundle's objects with this one's, and the two
// would take it from each other on every deploy. It is bad input (errors.Is
// ErrRender): one of the bundles must change its releaseName or namespace.
// The agent checks it (ReleaseOwner) before it prepares the namespace or
// copies downstreamResources, so a refused deploy writes nothing; it is
// retried once the owner is gone or being deleted, and then takes the
// release over (Input.TakeOver), as Rancher Fleet's upgrade does.
type ReleaseOwnedError struct {
	Release, Namespace string
	// Owner is the BundleDeployment the release's latest revision records.
	Owner string
}

func (e *ReleaseOwnedError) Error() string {
	return fmt.Sprintf("release %s in namespace %s belongs to BundleDeployment %s: two bundles cannot share a releaseName in the same namespace",
		e.Release, e.Namespace, e.Owner)
}

// Is makes a ReleaseOwnedError bad input for IsRenderError.
func (e *ReleaseOwnedError) Is(target error) bool { return target == ErrRender }

// otherOwner is the BundleDeployment rel (the latest revision the agent
// wrote of a release; nil for none) was deployed for, when that is not
// bdName; empty when it is bdName's or records no owner. The owner is the
// chart's fleet.cattle.io/bundle-id, which holds the full name, else the
// storage label, which may be the name cut to fit a label
// (names.Limit). It is read from storage on every deploy, so that after a
// restart the release still belongs to the one that has it, and the two
// bundles never take turns.
func otherOwner(rel *release.Release, bdName string) string {
	if rel == nil {
		return ""
	}
	if id := chartBundleID(rel); id != "" {
		if id == bdName {
			return ""
		}
		return id
	}
	if label := rel.Labels[StorageBundleIDLabel]; label != "" && label != names.Limit(bdName, maxLabelValue) {
		return label
	}
	return ""
}

// Deploy installs or upgrades the release of in and returns it.
func (d *Deployer) Deploy(ctx context.Context, in Input) (_ *Release, err error) {
	opts := in.Options
	helm := opts.Helm
	if helm == nil {
		helm = &fleet.HelmOptions{}
	}
	name := ReleaseName(in.Name, opts)
	if len(name) > names.MaxHelmReleaseNameLen {
		return nil, fmt.Errorf("%w: release name %q is longer than %d characters", ErrRender, name, names.MaxHelmReleaseNameLen)
	}
	ns := ReleaseNamespace(opts)
	if err := d.CheckTargetNamespace(ctx, opts); err != nil {
		return nil, err
	}
	// Bad content is reported before anything is written downstream.
	src, err := renderSource(in.Manifest, opts)
	if err != nil {
		return nil, err
	}
	values, sensitive, err := d.values(ctx, ns, helm)
	if err != nil {
		return nil, err
	}
	// Every error from here on reaches status: no value may show in it.
	// A ReleaseOwnedError holds only names, the owner's included.
	defer func() {
		if owned := (*ReleaseOwnedError)(nil); !errors.As(err, &owned) {
			err = redactValues(err, sensitive, name, ns, in.Name)
		}
	}()
	sa, err := d.serviceAccount(ctx, opts.ServiceAccount)
	if err != nil {
		return nil, err
	}
	ac, getter, err := d.actionConfig(ctx, ns, sa)
	if err != nil {
		return nil, err
	}
	// From the owner check to the record of the new revision, nothing
	// else acts on the release (releaseLocks).
	unlock, err := d.lockRelease(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := d.adopt(ctx, ac, in.Name, name); err != nil {
		return nil, err
	}
	last, err := d.lastRelease(ac, name)
	if err != nil {
		return nil, err
	}
	if owner := otherOwner(last, in.Name); owner != "" && owner != in.TakeOver {
		// Checked before anything is written: the other's release,
		// objects and namespace stay as they are. A release taken over
		// (its owner gone) is upgraded: objects of the same name keep
		// their identity (no delete and re-create of PVCs, generated
		// Secrets), and the new revision records in.Name.
		return nil, &ReleaseOwnedError{Release: name, Namespace: ns, Owner: owner}
	}
	if last == nil {
		if err := refuseForeign(ctx, ac, name); err != nil {
			return nil, err
		}
	}
	nsKey := namespaceKey(sa, ns, opts)
	// A release stored in ns (Helm keeps it there, and it goes with the
	// namespace) shows that the namespace exists: only labels or
	// annotations the bundle asks for need it read. That is one GET less
	// per upgrade on the cluster.
	needNamespace := last == nil || len(opts.NamespaceLabels) > 0 || len(opts.NamespaceAnnotations) > 0
	if _, ok := d.namespaces.get(nsKey); !ok && needNamespace {
		if err := d.ensureNamespace(ctx, getter, ns, opts); err != nil {
			return nil, err
		}
		d.namespaces.put(nsKey, struct{}{})
	}
	// A failed deploy may have met a namespace deleted meanwhile: the
	// retry checks it again.
	defer func() {
		if err != nil {
			d.namespaces.forget(nsKey)
		}
	}()
	mapper, err := getter.ToRESTMapper()
	if err != nil {
		return nil, err
	}
	pr := &postRenderer{
		bdName: in.Name, targetNamespace: opts.TargetNamespace, releaseNamespace: ns,
		keepCRDs: !opts.DeleteCRDResources, mapper: mapper,
		applyCRDs: func(crds []*unstructured.Unstructured) error {
			return d.applyBundleCRDs(ctx, getter, crds, releaseID{namespace: ns, name: name}, in.Name, helm.TakeOwnership)
		},
	}
	ch, postRender, err := chartOf(in.Name, src, pr)
	if err != nil {
		return nil, err
	}
	if ch.Metadata.Annotations == nil {
		ch.Metadata.Annotations = map[string]string{}
	}
	ch.Metadata.Annotations[fleet.BundleIDAnnotation] = in.Name
	ch.Metadata.Annotations[fleet.AgentNamespaceAnnotation] = d.agentNamespace
	ch.Metadata.Annotations[fleet.ServiceAccountAnnotation] = opts.ServiceAccount
	ch.Metadata.Annotations[fleet.KeepResourcesAnnotation] = fmt.Sprint(opts.KeepResources)
	if in.Commit != "" {
		ch.Metadata.Annotations[fleet.CommitAnnotation] = in.Commit
	}
	if in.DeploymentID != "" {
		ch.Metadata.Annotations[DeploymentIDAnnotation] = in.DeploymentID
	}
	labels := map[string]string{
		StorageBundleIDLabel:      names.Limit(in.Name, maxLabelValue),
		StorageAgentNamespaceLbl:  d.agentNamespace,
		StorageKeepResourcesLabel: fmt.Sprint(opts.KeepResources),
		StorageDeleteNSLabel:      fmt.Sprint(opts.DeleteNamespace),
	}
	wait, timeout := kube.HookOnlyStrategy, 5*time.Minute
	if helm.TimeoutSeconds > 0 {
		wait, timeout = kube.StatusWatcherStrategy, time.Duration(helm.TimeoutSeconds)*time.Second
	}
	if last != nil && (last.Info.Status == rcommon.StatusPendingInstall ||
		(last.Info.Status == rcommon.StatusFailed && last.Version == 1) ||
		last.Info.Status == rcommon.StatusUninstalled || last.Info.Status == rcommon.StatusUninstalling) {
		// A first install that never finished, or a release uninstalled
		// (an uninstall interrupted leaves it uninstalling, as Rancher
		// Fleet's mustUninstall knows): start over rather than failing
		// forever with "has no deployed releases". Objects left behind
		// carry this release's ownership, so the install adopts them.
		if err := purgeHistory(ac, name); err != nil {
			return nil, err
		}
		last = nil
	} else if last != nil && last.Info.Status.IsPending() {
		// An upgrade/rollback interrupted (agent restart): mark it failed
		// so the next upgrade can proceed.
		last.Info.Status = rcommon.StatusFailed
		if err := ac.Releases.Update(last); err != nil {
			return nil, err
		}
	}
	store, ok := ac.Releases.Driver.(*releaseStore)
	if !ok {
		return nil, fmt.Errorf("unexpected Helm storage driver %T", ac.Releases.Driver)
	}
	// A revision is written once, done, when nothing waits between its
	// apply and its record (see releaseStore.Create). Atomic waits too.
	store.holdPending = wait == kube.HookOnlyStrategy && !helm.Atomic
	client, ok := ac.KubeClient.(*kube.Client)
	if !ok {
		return nil, fmt.Errorf("unexpected Helm kube client %T", ac.KubeClient)
	}
	key := releaseKey(ns, name)
	run := &deployRun{
		ctx: ctx, ac: ac, client: client, mapper: mapper, deployed: d.deployed.get(key),
		opts: opts, helm: helm, name: name, ns: ns, last: last,
		ch: ch, values: values, postRender: postRender, labels: labels, wait: wait, timeout: timeout,
	}
	rel, kc, err := run.once()
	var adopted *adopter
	if isOwnershipConflict(err) && !helm.TakeOwnership {
		// Helm refused before writing anything: adopt what the agent
		// may (adoption), then run the action again.
		var aerr error
		if adopted, aerr = d.adoptObjects(ctx, getter, mapper, in.Name, run, pr.rendered); aerr != nil {
			err = aerr
		} else if len(adopted.marked) > 0 {
			rel, kc, err = run.once()
		}
	}
	out, err := d.recorded(store, kc, key, rel, err)
	if err != nil {
		if uerr := d.unadoptUnrecorded(ctx, run, adopted); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}
	return out, err
}

// chartOf returns the chart to install and the post-renderer Helm must run
// on it: pr for a Helm chart (running the bundle's kustomization, if any,
// over Helm's output first), none for a chart synthesized from final
// manifests, which pr transforms before the chart is built (and whose CRDs
// it creates right away).
func chartOf(name string, src source, pr *postRenderer) (*chart.Chart, postrenderer.PostRenderer, error) {
	if src.chart != nil {
		pr.kustomize = src.kustomize
		return src.chart, pr, nil
	}
	docs, crds, err := pr.preRender(src.docs)
	if err != nil {
		return nil, nil, err
	}
	ch, err := synthesizeChart(name, docs)
	if err != nil {
		return nil, nil, err
	}
	if err := pr.createCRDs(crds); err != nil {
		return nil, nil, err
	}
	return ch, nil, nil
}

func maxHistory(h *fleet.HelmOptions) int {
	if h == nil || h.MaxHistory <= 0 {
		return DefaultMaxHistory
	}
	return h.MaxHistory
}
