package registration

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/kubeclient"
)

// Reasons of the Imported condition.
const (
	ReasonImported          = "Imported"
	ReasonSecretNotAllowed  = "KubeconfigSecretNamespaceNotAllowed"
	ReasonSecretMissing     = "KubeconfigSecretMissing"
	ReasonBadKubeconfig     = "InvalidKubeconfig"
	ReasonUnreachable       = "ClusterUnreachable"
	ReasonMissingAPIServer  = "MissingAPIServerURL"
	ReasonWaitingToken      = "WaitingForImportToken"
	ReasonApplyFailed       = "ApplyFailed"
	importTokenPrefix       = "import-token-"
	bootstrapSecretName     = "fleet-agent-bootstrap"
	agentConfigMapName      = "fleet-agent"
	importConnectionTimeout = 15 * time.Second
)

// ReasonInvalidAgentScheduling is the reason of Imported=False when the
// Cluster's agentSchedulingCustomization cannot be applied (AgentSpecError).
const ReasonInvalidAgentScheduling = "InvalidAgentSchedulingCustomization"

func importTokenName(c *fleet.Cluster) string { return importTokenPrefix + c.Name }

// importError is an import failure with the reason shown on the Cluster.
// It is retried with backoff: the user may fix the Secret or the network.
type importError struct {
	reason string
	err    error
}

func (e *importError) Error() string { return e.err.Error() }
func (e *importError) Unwrap() error { return e.err }

// allowedSecretNamespace says whether the kubeconfig Secret of a Cluster in
// clusterNS may be read from ns (Fleet's list), so that a workspace user
// cannot make the manager read kubeconfigs from arbitrary namespaces.
// fleet-local is narrower than in Rancher Fleet: it holds the manager's own
// cluster's kubeconfig (Secret local-cluster), and a Cluster in another
// workspace pointing at it would install an agent on the management
// cluster for that workspace.
func allowedSecretNamespace(clusterNS, ns string) bool {
	switch ns {
	case clusterNS, fleet.DefaultWorkspace, fleet.DefaultSystemNamespace, "fleet-system",
		fleet.DefaultSystemRegistrationNamespace, "fleet-clusters-system":
		return true
	}
	return strings.HasPrefix(ns, "cluster-")
}

// kubeconfigRecheck is how often the manager reads the kubeconfig Secret of
// a cluster it imported again (from the API server's watch cache), to see
// whether the apiServerURL/apiServerCA its agent is to use changed there.
// A change of the Secret wakes its Clusters at once (kubeconfigSecretHandler);
// this is the safety net for an event the watch missed. A variable only so
// that tests can shorten it.
var kubeconfigRecheck = 10 * time.Minute

// kubeconfigRecheckOf is the recheck interval of one cluster: always
// kubeconfigRecheck, but the package's tests give the clusters of one
// workspace a recheck too long to ever fire, so that only the Secret
// watch can explain that their agent followed a Secret change. Set before
// any manager starts, never after.
var kubeconfigRecheckOf = func(*fleet.Cluster) time.Duration { return kubeconfigRecheck }

// importCluster installs the agent on a Cluster's downstream cluster from its
// kubeconfig Secret, and installs it again when spec.redeployAgentGeneration
// is bumped or the agent's configuration changed (agentConfigHash: the
// Cluster's agent settings, the manager's agent image, API server,
// check-in or garbage collection interval, and the apiServerURL/apiServerCA
// of the kubeconfig Secret, looked at again when the Secret changes and
// every kubeconfigRecheck). Otherwise the manager does not contact the
// cluster. A Cluster imported before the hash was
// recorded waits its turn within backfillSpread. An install records the
// namespace installed in (status.agentDeployedNamespace); an agent
// installed there is never moved: while the Cluster names another
// namespace nothing is installed or removed (refuseAgentMove). Cluster
// "local" with Options.LocalAgentDisabled gets no agent
// (disableLocalAgent).
func (r *ClusterReconciler) importCluster(ctx context.Context, cluster *fleet.Cluster) (ctrl.Result, error) {
	if r.localAgentDisabled(cluster) {
		return r.disableLocalAgent(ctx, cluster)
	}
	if r.agentMoveRefused(cluster) {
		// Before any other change is looked at: none is installed
		// until the namespace is set back.
		r.refuseAgentMove(ctx, cluster)
		return ctrl.Result{}, nil
	}
	over, err := r.currentOverride(ctx, cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	hash, err := r.agentConfigHashWith(cluster, over)
	var bad *AgentSpecError
	if errors.As(err, &bad) {
		r.refuseAgentSpec(ctx, cluster, bad)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	recheck := ctrl.Result{RequeueAfter: jitter(kubeconfigRecheckOf(cluster))}
	why := importReason(cluster, hash)
	if why == "" {
		r.recordAgentNamespace(cluster)
		return recheck, nil
	}
	if why == reasonConfigChanged && cluster.Status.AgentConfigHash == "" {
		if wait := backfillDelay(cluster.UID, backfillStart(time.Now()), time.Now(), backfillSpread); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	res, applied, err := r.doImport(ctx, cluster)
	if err == nil && res.RequeueAfter == 0 && applied != over {
		// The Secret changed since the look above: record what was
		// installed.
		hash, err = r.agentConfigHashWith(cluster, applied)
	}
	var ie *importError
	switch {
	case err == nil && res.RequeueAfter > 0:
		return res, nil
	case err == nil:
		gen := cluster.Spec.RedeployAgentGeneration
		cluster.Status.AgentDeployedGeneration = &gen
		cluster.Status.AgentConfigHash = hash
		cluster.Status.AgentMigrated = true
		cluster.Status.AgentDeployedNamespace = r.agentNamespace(cluster)
		setCond(&cluster.Status.Conditions, fleet.ConditionImported, metav1.ConditionTrue, ReasonImported, "agent installed", cluster.Generation)
		ctrl.LoggerFrom(ctx).Info("imported cluster: agent installed downstream", "why", why)
		return recheck, nil
	case errors.As(err, &bad):
		r.refuseAgentSpec(ctx, cluster, bad)
		return ctrl.Result{}, nil
	case errors.As(err, &ie):
		ctrl.LoggerFrom(ctx).Info("cluster import failed, retrying with backoff", "reason", ie.reason, "error", ie.err.Error())
		setCond(&cluster.Status.Conditions, fleet.ConditionImported, metav1.ConditionFalse, ie.reason, ie.err.Error(), cluster.Generation)
		return ctrl.Result{}, err
	default:
		setCond(&cluster.Status.Conditions, fleet.ConditionImported, metav1.ConditionFalse, "Error", err.Error(), cluster.Generation)
		return ctrl.Result{}, err
	}
}

// refuseAgentSpec stops the import of cluster on a setting that cannot be
// applied: Imported=False with the reason, and a Warning Event when the
// condition is new. Nothing is retried (the error is returned to no one):
// an edit of the Cluster starts the next attempt, and the agent installed
// before stays as it is.
func (r *ClusterReconciler) refuseAgentSpec(ctx context.Context, cluster *fleet.Cluster, bad *AgentSpecError) {
	msg := bad.Error() + "; the agent is neither installed nor updated until the Cluster is fixed"
	if r.setImported(cluster, metav1.ConditionFalse, ReasonInvalidAgentScheduling, corev1.EventTypeWarning, msg) {
		ctrl.LoggerFrom(ctx).Info("cluster import stopped: invalid agent settings", "field", bad.Field)
	}
}

// setImported sets the Imported condition of cluster, and records an
// Event of type typ with the same reason and message when the condition
// is new (another reason or message), so that a state the manager keeps
// finding at each look is told once. It says whether it was new.
func (r *ClusterReconciler) setImported(cluster *fleet.Cluster, status metav1.ConditionStatus, reason, typ, msg string) bool {
	prev := meta.FindStatusCondition(cluster.Status.Conditions, fleet.ConditionImported)
	isNew := prev == nil || prev.Reason != reason || prev.Message != msg
	if isNew {
		r.event(cluster, typ, reason, "Import", "%s", msg)
	}
	setCond(&cluster.Status.Conditions, fleet.ConditionImported, status, reason, msg, cluster.Generation)
	return isNew
}

// connect is a client of cluster's downstream cluster, made from its
// kubeconfig Secret (also returned) once the cluster answered. A failure
// the user can fix (the Secret, the kubeconfig, the network) is an
// *importError.
func (r *ClusterReconciler) connect(ctx context.Context, cluster *fleet.Cluster) (client.Client, *corev1.Secret, error) {
	secretNS := kubeconfigSecretNamespace(cluster)
	if !allowedSecretNamespace(cluster.Namespace, secretNS) {
		return nil, nil, &importError{ReasonSecretNotAllowed, fmt.Errorf("kubeConfigSecretNamespace %q is not allowed", secretNS)}
	}
	kcSecret := &corev1.Secret{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: secretNS, Name: cluster.Spec.KubeConfigSecret}, kcSecret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &importError{ReasonSecretMissing, fmt.Errorf("kubeconfig secret %s/%s not found", secretNS, cluster.Spec.KubeConfigSecret)}
		}
		return nil, nil, err
	}
	if r.isLocalKubeconfig(cluster, secretNS, cluster.Spec.KubeConfigSecret) && isStaleLocalKubeconfig(kcSecret, time.Now()) {
		// The token written at start-up lasts ImportTokenTTL; a redeploy
		// of the local agent later needs a new one.
		fresh, err := r.writeLocalKubeconfig(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("refreshing the local cluster's kubeconfig: %w", err)
		}
		kcSecret = fresh
	}
	cfg, err := importRESTConfig(kcSecret.Data["value"])
	if err != nil {
		return nil, nil, &importError{ReasonBadKubeconfig, fmt.Errorf("kubeconfig secret %s/%s: %w", secretNS, cluster.Spec.KubeConfigSecret, err)}
	}
	cfg.Timeout = importConnectionTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err == nil {
		_, err = dc.ServerVersion()
	}
	if err != nil {
		return nil, nil, &importError{ReasonUnreachable, fmt.Errorf("cannot reach the cluster with the kubeconfig: %w", err)}
	}
	down, err := client.New(cfg, client.Options{Scheme: r.Client.Scheme()})
	if err != nil {
		return nil, nil, &importError{ReasonUnreachable, err}
	}
	return down, kcSecret, nil
}

// doImport applies the agent to cluster's downstream cluster and returns
// the apiServerURL/apiServerCA of the kubeconfig Secret it applied with.
func (r *ClusterReconciler) doImport(ctx context.Context, cluster *fleet.Cluster) (ctrl.Result, apiServerOverride, error) {
	down, kcSecret, err := r.connect(ctx, cluster)
	if err != nil {
		return ctrl.Result{}, apiServerOverride{}, err
	}
	tokValues, res, err := r.importValues(ctx, cluster)
	if err != nil || res.RequeueAfter > 0 {
		return res, apiServerOverride{}, err
	}
	// The URL and CA are the manager's now, as hashed, not the token's:
	// its values keep those of when they were written (a manager
	// restarted with others would install the old ones, under the new
	// hash, until the token expired).
	over := overrideOf(kcSecret)
	values := r.agentValues(cluster, over)
	values.Token, values.TokenName = tokValues.Token, tokValues.TokenName
	if values.APIServerURL == "" {
		return ctrl.Result{}, apiServerOverride{}, &importError{ReasonMissingAPIServer, errors.New("missing apiServerURL in the manager config and the kubeconfig secret")}
	}
	objs, err := AgentObjects(r.agentManifest(cluster, values))
	if err != nil {
		return ctrl.Result{}, apiServerOverride{}, err
	}
	if err := applyAgent(ctx, down, objs); err != nil {
		return ctrl.Result{}, apiServerOverride{}, &importError{ReasonApplyFailed, err}
	}
	cluster.Status.APIServerURL = values.APIServerURL
	sum := sha256.Sum224([]byte(values.APIServerCA))
	cluster.Status.APIServerCAHash = hex.EncodeToString(sum[:])
	cluster.Status.AgentTLSMode = "strict"
	cluster.Status.GarbageCollectionInterval = &metav1.Duration{Duration: agentGCInterval(r.Opts.GarbageCollectionInterval)}
	return ctrl.Result{}, over, nil
}

// agentGCInterval is the interval an agent installed with the manager's
// setting d collects at, as status.garbageCollectionInterval records it
// (as Rancher Fleet does): d, or the agent's default when d is not set.
func agentGCInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return register.DefaultGCInterval
	}
	return d
}

// importReason says why cluster's agent is to be installed now, or "" when
// the one installed last is current: it is installed once, and again on a
// redeployAgentGeneration bump or when its configuration hash changed.
func importReason(cluster *fleet.Cluster, hash string) string {
	switch {
	case !meta.IsStatusConditionTrue(cluster.Status.Conditions, fleet.ConditionImported):
		return "not imported yet"
	case cluster.Status.AgentDeployedGeneration == nil || *cluster.Status.AgentDeployedGeneration != cluster.Spec.RedeployAgentGeneration:
		return "redeployAgentGeneration changed"
	case cluster.Status.AgentConfigHash != hash:
		return reasonConfigChanged
	}
	return ""
}

// reasonConfigChanged is importReason's answer when the hash differs.
const reasonConfigChanged = "agent configuration changed"

// backfillSpread is the time over which a manager upgraded from a version
// that did not record status.agentConfigHash installs the agents it
// imported before once more (their hash is empty, so it differs): each
// cluster waits its own share of it instead of all being installed at
// once, which would mint an import token and contact a downstream cluster
// per cluster in one burst. A variable only so that tests can change it.
var backfillSpread = 10 * time.Minute

// backfill is when this process first met a cluster whose hash is to be
// backfilled (not its start: a standby manager may lead hours later).
var backfill struct {
	once  sync.Once
	start time.Time
}

// backfillStart is when the backfill started, now if it starts now.
func backfillStart(now time.Time) time.Time {
	backfill.once.Do(func() { backfill.start = now })
	return backfill.start
}

// backfillDelay is how long a cluster whose hash is to be backfilled
// still waits at now: its share of spread from start, the same for the
// cluster at every look (its UID picks it), so that the clusters are
// installed evenly over spread and each exactly once.
func backfillDelay(uid types.UID, start, now time.Time, spread time.Duration) time.Duration {
	if spread <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	offset := time.Duration(h.Sum64() % uint64(spread))
	return max(start.Add(offset).Sub(now), 0)
}

// agentManifest is the agent manifest of cluster with values; import and
// agentConfigHash both build it here, so that the hash covers what is
// applied.
func (r *ClusterReconciler) agentManifest(cluster *fleet.Cluster, values Values) AgentManifest {
	return AgentManifest{
		Namespace: r.agentNamespace(cluster), Values: values, ClientID: cluster.Spec.ClientID, Labels: cluster.Labels,
		Image: r.Opts.AgentImage, CheckinInterval: r.Opts.AgentCheckinInterval, Cluster: cluster,
		GarbageCollectionInterval: r.Opts.GarbageCollectionInterval, Settings: r.Opts.Agent,
	}
}

// agentNamespace is the downstream namespace of cluster's agent:
// spec.agentNamespace, else the manager's system namespace.
func (r *ClusterReconciler) agentNamespace(cluster *fleet.Cluster) string {
	if ns := cluster.Spec.AgentNamespace; ns != "" {
		return ns
	}
	return r.Opts.SystemNamespace
}

// agentConfigHash is agentConfigHashWith for a kubeconfig Secret without
// apiServerURL/apiServerCA.
func (r *ClusterReconciler) agentConfigHash(cluster *fleet.Cluster) (string, error) {
	return r.agentConfigHashWith(cluster, apiServerOverride{})
}

// agentConfigHashWith is the SHA-256 of the agent manifest the manager
// would apply to cluster now, its kubeconfig Secret holding over, without
// what changes while the agent's configuration does not: the import token
// (a new one for each import, and never written to status, not even
// hashed) and the Cluster's labels (the agent sends them once, at
// registration; the Cluster keeps them itself). The API server and CA are
// the manager's (agentValues) unless the Secret replaces them; they
// enter the status only through this hash (and, as in Rancher Fleet,
// status.apiServerURL and the CA's own hash).
func (r *ClusterReconciler) agentConfigHashWith(cluster *fleet.Cluster, over apiServerOverride) (string, error) {
	m := r.agentManifest(cluster, r.agentValues(cluster, over))
	m.Labels = nil
	objs, err := AgentObjects(m)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(objs)
	if err != nil {
		return "", fmt.Errorf("hashing the agent manifest: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// agentValues are the values of the agent installed on cluster, its
// kubeconfig Secret holding over, but for the import token: the manager's
// apiServerURL/apiServerCA unless the Secret replaces them. The hash and
// doImport both take them from here, so that what is installed is what is
// hashed.
func (r *ClusterReconciler) agentValues(cluster *fleet.Cluster, over apiServerOverride) Values {
	values := Values{
		APIServerURL: r.Opts.APIServerURL, APIServerCA: string(r.Opts.APIServerCA),
		ClusterNamespace: cluster.Namespace, SystemRegistrationNamespace: r.Opts.SystemRegistrationNamespace,
	}
	over.apply(&values)
	return values
}

// apiServerOverride is the apiServerURL and apiServerCA of a kubeconfig
// Secret (empty when it has none): they replace the manager's own for that
// cluster's agent. Never logged.
type apiServerOverride struct{ url, ca string }

func overrideOf(s *corev1.Secret) apiServerOverride {
	return apiServerOverride{url: string(s.Data["apiServerURL"]), ca: string(s.Data["apiServerCA"])}
}

// apply puts o into v where the Secret sets it.
func (o apiServerOverride) apply(v *Values) {
	if o.url != "" {
		v.APIServerURL = o.url
	}
	if o.ca != "" {
		v.APIServerCA = o.ca
	}
}

// kubeconfigSecretNamespace is where cluster's kubeconfig Secret is.
func kubeconfigSecretNamespace(cluster *fleet.Cluster) string {
	if ns := cluster.Spec.KubeConfigSecretNamespace; ns != "" {
		return ns
	}
	return cluster.Namespace
}

// currentOverride is the apiServerURL/apiServerCA of cluster's kubeconfig
// Secret now, read from the API server's watch cache (no etcd read for
// the periodic look of every imported cluster), at least as new as the
// version the manager's Secret watch has seen: woken by a change of the
// Secret, the look must not be answered by an API server whose cache is
// still behind it (several behind one address), or the change would wait
// for the recheck. Without a version there (not cached, not yet seen) any
// is taken (resourceVersion 0). A Secret that is missing, or in a
// namespace it may not be read from, replaces nothing: should an install
// follow, it fails on that and says so on the Cluster.
func (r *ClusterReconciler) currentOverride(ctx context.Context, cluster *fleet.Cluster) (apiServerOverride, error) {
	ns := kubeconfigSecretNamespace(cluster)
	if !allowedSecretNamespace(cluster.Namespace, ns) {
		return apiServerOverride{}, nil
	}
	key := client.ObjectKey{Namespace: ns, Name: cluster.Spec.KubeConfigSecret}
	rv := "0"
	if seen := kubeclient.MetadataOf(corev1.SchemeGroupVersion.WithKind("Secret")); r.Client.Get(ctx, key, seen) == nil && seen.ResourceVersion != "" {
		rv = seen.ResourceVersion
	}
	s := &corev1.Secret{}
	err := r.Reader.Get(ctx, key, s, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: rv}})
	if err != nil && rv != "0" && !apierrors.IsNotFound(err) {
		// An API server behind the watched version (several behind one
		// address) times out or refuses it: take what it has rather than
		// fail the Cluster's reconcile; the next event or recheck follows.
		err = r.Reader.Get(ctx, key, s, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
	}
	switch {
	case apierrors.IsNotFound(err):
		return apiServerOverride{}, nil
	case err != nil:
		return apiServerOverride{}, fmt.Errorf("reading kubeconfig secret %s/%s: %w", ns, cluster.Spec.KubeConfigSecret, err)
	}
	return overrideOf(s), nil
}

// kubeconfigSecretIndex indexes Clusters by the kubeconfig Secret they
// import from (kubeconfigSecretKey), so that a Secret event finds its
// Clusters without a scan of every Cluster.
const kubeconfigSecretIndex = "registration.cluster.kubeconfigSecret"

// kubeconfigSecretKey is the index value of the Secret ns/name.
func kubeconfigSecretKey(ns, name string) string { return ns + "/" + name }

// indexKubeconfigSecret is the kubeconfigSecretIndex value of a Cluster:
// the Secret's own namespace (spec.kubeConfigSecretNamespace, else the
// Cluster's) and name; none for a Cluster that imports nothing.
func indexKubeconfigSecret(o client.Object) []string {
	c, ok := o.(*fleet.Cluster)
	if !ok || c.Spec.KubeConfigSecret == "" {
		return nil
	}
	return []string{kubeconfigSecretKey(kubeconfigSecretNamespace(c), c.Spec.KubeConfigSecret)}
}

// watchKubeconfigSecrets indexes Clusters by their kubeconfig Secret and
// returns what the Cluster controller watches for a change of one: the
// Secret's metadata and kubeconfigSecretHandler.
func (r *ClusterReconciler) watchKubeconfigSecrets(mgr ctrl.Manager) (*metav1.PartialObjectMetadata, handler.EventHandler, error) {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &fleet.Cluster{}, kubeconfigSecretIndex, indexKubeconfigSecret); err != nil {
		return nil, nil, fmt.Errorf("indexing clusters by kubeconfig secret: %w", err)
	}
	return kubeclient.MetadataOf(corev1.SchemeGroupVersion.WithKind("Secret")), r.kubeconfigSecretHandler(), nil
}

// kubeconfigSecretHandler wakes the Clusters that import from a Secret
// when it is created, changed or deleted, so that a new
// apiServerURL/apiServerCA reaches their agent at once instead of at the
// next kubeconfigRecheck, and an import that failed on the Secret (missing,
// bad kubeconfig) is retried as soon as it is fixed. Resyncs (same
// resourceVersion) wake nothing. A Cluster that may not read the Secret's
// namespace is left alone: it never reads the Secret. Registration runs
// unsharded and sees every Cluster, so no shard is filtered here.
func (r *ClusterReconciler) kubeconfigSecretHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		clusters := &fleet.ClusterList{}
		if err := r.Client.List(ctx, clusters, client.MatchingFields{kubeconfigSecretIndex: kubeconfigSecretKey(o.GetNamespace(), o.GetName())}); err != nil {
			// The recheck still finds the change.
			ctrl.LoggerFrom(ctx).Error(err, "listing the clusters importing from a secret", "namespace", o.GetNamespace(), "secret", o.GetName())
			return
		}
		for i := range clusters.Items {
			if c := &clusters.Items[i]; allowedSecretNamespace(c.Namespace, o.GetNamespace()) {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion() {
				enqueue(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q)
		},
	}
}

// importValues returns the values of the cluster's import token, creating
// the token first (owned by the Cluster, TTL ImportTokenTTL).
func (r *ClusterReconciler) importValues(ctx context.Context, cluster *fleet.Cluster) (*Values, ctrl.Result, error) {
	tok := &fleet.ClusterRegistrationToken{}
	key := client.ObjectKey{Namespace: cluster.Namespace, Name: importTokenName(cluster)}
	err := r.Client.Get(ctx, key, tok)
	expired := err == nil && tokenExpiry(tok) != nil && time.Until(tokenExpiry(tok).Time) < r.Opts.ImportTokenTTL/2
	if expired {
		// A re-import needs a fresh token; the old one is revoked.
		if err := deleteIfExists(ctx, r.Client, tok); err != nil {
			return nil, ctrl.Result{}, err
		}
		return nil, ctrl.Result{RequeueAfter: jitter(importRetry)}, nil
	}
	if apierrors.IsNotFound(err) {
		tok = &fleet.ClusterRegistrationToken{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: fleet.GroupVersion.String(), Kind: "Cluster", Name: cluster.Name, UID: cluster.UID}}},
			Spec: fleet.ClusterRegistrationTokenSpec{TTL: &metav1.Duration{Duration: r.Opts.ImportTokenTTL}},
		}
		if err := r.Client.Create(ctx, tok); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, ctrl.Result{}, err
		}
		setCond(&cluster.Status.Conditions, fleet.ConditionImported, metav1.ConditionFalse, ReasonWaitingToken, "waiting for the import token", cluster.Generation)
		return nil, ctrl.Result{RequeueAfter: jitter(importRetry)}, nil
	} else if err != nil {
		return nil, ctrl.Result{}, err
	}
	secret := &corev1.Secret{}
	if tok.Status.SecretName == "" {
		setCond(&cluster.Status.Conditions, fleet.ConditionImported, metav1.ConditionFalse, ReasonWaitingToken, "waiting for the import token", cluster.Generation)
		return nil, ctrl.Result{RequeueAfter: jitter(importRetry)}, nil
	}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: tok.Namespace, Name: tok.Status.SecretName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, ctrl.Result{RequeueAfter: jitter(importRetry)}, nil
		}
		return nil, ctrl.Result{}, err
	}
	v := &Values{}
	if err := yaml.Unmarshal(secret.Data["values"], v); err != nil {
		return nil, ctrl.Result{}, fmt.Errorf("reading values of import token: %w", err)
	}
	return v, ctrl.Result{}, nil
}

// AgentConfig is the JSON in the fleet-agent ConfigMap (key "config"): the
// agent's own type, so that what the manager writes is what the agent
// reads.
type AgentConfig = register.AgentConfig

func marshalConfig(c AgentConfig) string {
	b, _ := json.Marshal(c)
	return string(b)
}

func randomString(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
