package registration

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
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

// importCluster installs the agent on a Cluster's downstream cluster from its
// kubeconfig Secret, and installs it again when spec.redeployAgentGeneration
// is bumped or the agent's configuration changed (agentConfigHash: the
// Cluster's agent settings, the manager's agent image, API server or
// check-in interval). Otherwise the manager does not contact the cluster.
func (r *ClusterReconciler) importCluster(ctx context.Context, cluster *fleet.Cluster) (ctrl.Result, error) {
	hash, err := r.agentConfigHash(cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	why := importReason(cluster, hash)
	if why == "" {
		return ctrl.Result{}, nil
	}
	res, err := r.doImport(ctx, cluster)
	var ie *importError
	switch {
	case err == nil && res.RequeueAfter > 0:
		return res, nil
	case err == nil:
		gen := cluster.Spec.RedeployAgentGeneration
		cluster.Status.AgentDeployedGeneration = &gen
		cluster.Status.AgentConfigHash = hash
		cluster.Status.AgentMigrated = true
		setCond(&cluster.Status.Conditions, fleet.ConditionImported, metav1.ConditionTrue, ReasonImported, "agent installed", cluster.Generation)
		ctrl.LoggerFrom(ctx).Info("imported cluster: agent installed downstream", "why", why)
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

func (r *ClusterReconciler) doImport(ctx context.Context, cluster *fleet.Cluster) (ctrl.Result, error) {
	secretNS := cluster.Spec.KubeConfigSecretNamespace
	if secretNS == "" {
		secretNS = cluster.Namespace
	}
	if !allowedSecretNamespace(cluster.Namespace, secretNS) {
		return ctrl.Result{}, &importError{ReasonSecretNotAllowed, fmt.Errorf("kubeConfigSecretNamespace %q is not allowed", secretNS)}
	}
	kcSecret := &corev1.Secret{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: secretNS, Name: cluster.Spec.KubeConfigSecret}, kcSecret); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, &importError{ReasonSecretMissing, fmt.Errorf("kubeconfig secret %s/%s not found", secretNS, cluster.Spec.KubeConfigSecret)}
		}
		return ctrl.Result{}, err
	}
	if r.isLocalKubeconfig(cluster, secretNS, cluster.Spec.KubeConfigSecret) && isStaleLocalKubeconfig(kcSecret, time.Now()) {
		// The token written at start-up lasts ImportTokenTTL; a redeploy
		// of the local agent later needs a new one.
		fresh, err := r.writeLocalKubeconfig(ctx)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("refreshing the local cluster's kubeconfig: %w", err)
		}
		kcSecret = fresh
	}
	cfg, err := importRESTConfig(kcSecret.Data["value"])
	if err != nil {
		return ctrl.Result{}, &importError{ReasonBadKubeconfig, fmt.Errorf("kubeconfig secret %s/%s: %w", secretNS, cluster.Spec.KubeConfigSecret, err)}
	}
	cfg.Timeout = importConnectionTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err == nil {
		_, err = dc.ServerVersion()
	}
	if err != nil {
		return ctrl.Result{}, &importError{ReasonUnreachable, fmt.Errorf("cannot reach the cluster with the kubeconfig: %w", err)}
	}

	values, res, err := r.importValues(ctx, cluster)
	if err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	if u := string(kcSecret.Data["apiServerURL"]); u != "" {
		values.APIServerURL = u
	}
	if ca := kcSecret.Data["apiServerCA"]; len(ca) > 0 {
		values.APIServerCA = string(ca)
	}
	if values.APIServerURL == "" {
		return ctrl.Result{}, &importError{ReasonMissingAPIServer, errors.New("missing apiServerURL in the manager config and the kubeconfig secret")}
	}
	down, err := client.New(cfg, client.Options{Scheme: r.Client.Scheme()})
	if err != nil {
		return ctrl.Result{}, &importError{ReasonUnreachable, err}
	}
	objs, err := AgentObjects(r.agentManifest(cluster, *values))
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, o := range objs {
		if err := apply(ctx, down, o); err != nil {
			return ctrl.Result{}, &importError{ReasonApplyFailed, err}
		}
	}
	cluster.Status.APIServerURL = values.APIServerURL
	sum := sha256.Sum224([]byte(values.APIServerCA))
	cluster.Status.APIServerCAHash = hex.EncodeToString(sum[:])
	cluster.Status.AgentTLSMode = "strict"
	return ctrl.Result{}, nil
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
		return "agent configuration changed"
	}
	return ""
}

// agentManifest is the agent manifest of cluster with values; import and
// agentConfigHash both build it here, so that the hash covers what is
// applied.
func (r *ClusterReconciler) agentManifest(cluster *fleet.Cluster, values Values) AgentManifest {
	ns := cluster.Spec.AgentNamespace
	if ns == "" {
		ns = r.Opts.SystemNamespace
	}
	return AgentManifest{
		Namespace: ns, Values: values, ClientID: cluster.Spec.ClientID, Labels: cluster.Labels,
		Image: r.Opts.AgentImage, CheckinInterval: r.Opts.AgentCheckinInterval, Cluster: cluster,
	}
}

// agentConfigHash is the SHA-256 of the agent manifest the manager would
// apply to cluster now, without what changes while the agent's
// configuration does not: the import token (a new one for each import,
// and never written to status, not even hashed) and the Cluster's labels
// (the agent sends them once, at registration; the Cluster keeps them
// itself). It needs no read: the API server and CA are the manager's
// (the token's values); a kubeconfig Secret's apiServerURL/apiServerCA
// override is not watched and takes effect with the next install.
func (r *ClusterReconciler) agentConfigHash(cluster *fleet.Cluster) (string, error) {
	m := r.agentManifest(cluster, Values{
		APIServerURL: r.Opts.APIServerURL, APIServerCA: string(r.Opts.APIServerCA),
		ClusterNamespace: cluster.Namespace, SystemRegistrationNamespace: r.Opts.SystemRegistrationNamespace,
	})
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

// AgentConfig is the JSON in the fleet-agent ConfigMap (key "config").
type AgentConfig struct {
	Labels                    map[string]string `json:"labels,omitempty"`
	ClientID                  string            `json:"clientID,omitempty"`
	AgentTLSMode              string            `json:"agentTLSMode,omitempty"`
	GarbageCollectionInterval string            `json:"garbageCollectionInterval,omitempty"`
}

func marshalConfig(c AgentConfig) string {
	b, _ := json.Marshal(c)
	return string(b)
}

func randomString(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
