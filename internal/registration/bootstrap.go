package registration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

const (
	localKubeconfigSecret = "local-cluster"
	bootstrapSA           = "fleet-controller-bootstrap"
)

// Bootstrap creates, once the manager leads, the system namespaces and, when
// a bootstrap namespace is configured, the bootstrap namespace
// (fleet-local) with Cluster "local" and ClusterGroup "default", so that a
// single-cluster user needs no registration step. Cluster "local" is
// imported from Secret local-cluster, whose kubeconfig uses a token of the
// fleet-controller-bootstrap ServiceAccount (cluster-admin through the
// binding the fleet chart installs, see ensureBootstrapIdentity),
// refreshed at every start and by an import of the local cluster after it
// ended.
// Existing Cluster and ClusterGroup objects are left as the user made them.
type Bootstrap struct {
	reconcilerBase
}

// Start implements manager.Runnable; it retries with jittered backoff.
func (b *Bootstrap) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("bootstrap")
	delay := time.Second
	warned := false
	for {
		err := b.run(ctx)
		if err == nil {
			log.Info("system namespaces and local cluster bootstrapped", "namespace", b.Opts.BootstrapNamespace)
			return nil
		}
		log.Error(err, "bootstrapping the local cluster, retrying")
		if idErr := (*BootstrapIdentityError)(nil); !warned && errors.As(err, &idErr) {
			// An install step is missing: say so once where the user
			// looks (kubectl describe cluster local), not only in the log.
			warned = b.warnLocalCluster(ctx, idErr)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(jitter(delay)):
		}
		delay = min(delay*2, 5*time.Minute)
	}
}

func (b *Bootstrap) run(ctx context.Context) error {
	// The system namespaces are needed by registration whether or not the
	// local cluster is bootstrapped: registration secrets live in the
	// system registration namespace.
	ns := b.Opts.BootstrapNamespace
	for _, n := range []string{b.Opts.SystemNamespace, b.Opts.SystemRegistrationNamespace, ns} {
		if n == "" {
			continue
		}
		if err := apply(ctx, b.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			return err
		}
	}
	if ns == "" {
		return nil
	}
	// The kubeconfig is written before Cluster "local" exists, so that its
	// first import finds it. When it cannot be made (the bootstrap
	// ServiceAccount or its binding is missing and the manager may not
	// create them), Cluster "local" and ClusterGroup "default" are created
	// all the same: targets and GitRepos of the user resolve, the Cluster
	// shows why it is not imported, and the import runs once a later
	// attempt here writes the kubeconfig.
	_, kubeconfigErr := b.writeLocalKubeconfig(ctx)
	cluster := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: fleet.LocalClusterName, Namespace: ns, Labels: map[string]string{"name": fleet.LocalClusterName}},
		Spec:       fleet.ClusterSpec{KubeConfigSecret: localKubeconfigSecret},
	}
	if err := b.Client.Create(ctx, cluster); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating local cluster: %w", err)
	}
	group := &fleet.ClusterGroup{
		ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultClusterGroup, Namespace: ns},
		Spec:       fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": fleet.LocalClusterName}}},
	}
	if err := b.Client.Create(ctx, group); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating default cluster group: %w", err)
	}
	return kubeconfigErr
}

// writeLocalKubeconfig writes Secret local-cluster in the bootstrap
// namespace with a new token (see localKubeconfig) and returns it. The
// token's expiry is in annotation tokenExpiryAnnotation, so that an import
// of the local cluster after it requests a new one (isStaleLocalKubeconfig).
func (b *reconcilerBase) writeLocalKubeconfig(ctx context.Context) (*corev1.Secret, error) {
	kubeconfig, expiry, err := b.localKubeconfig(ctx)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: localKubeconfigSecret, Namespace: b.Opts.BootstrapNamespace,
			Annotations: map[string]string{tokenExpiryAnnotation: expiry.UTC().Format(time.RFC3339)}},
		Data: map[string][]byte{
			"value":        kubeconfig,
			"apiServerURL": []byte(b.Config.Host),
			"apiServerCA":  b.caData(),
		},
	}
	if err := apply(ctx, b.Client, secret); err != nil {
		return nil, err
	}
	return secret, nil
}

// isLocalKubeconfig says whether the kubeconfig Secret secretNS/name of
// cluster is the one writeLocalKubeconfig writes for it.
func (b *reconcilerBase) isLocalKubeconfig(cluster *fleet.Cluster, secretNS, name string) bool {
	ns := b.Opts.BootstrapNamespace
	return ns != "" && cluster.Namespace == ns && secretNS == ns && name == localKubeconfigSecret
}

// isStaleLocalKubeconfig says whether the token in Secret local-cluster has
// ended or ends soon (or its end is not recorded), at now.
func isStaleLocalKubeconfig(s *corev1.Secret, now time.Time) bool {
	t, err := time.Parse(time.RFC3339, s.Annotations[tokenExpiryAnnotation])
	return err != nil || t.Sub(now) < minTokenLifetime
}

func (b *reconcilerBase) caData() []byte {
	if len(b.Config.CAData) > 0 {
		return b.Config.CAData
	}
	if b.Config.CAFile != "" {
		if d, err := os.ReadFile(b.Config.CAFile); err == nil {
			return d
		}
	}
	return nil
}

// localKubeconfig is a kubeconfig for this cluster with a token of the
// bootstrap ServiceAccount (cluster-admin, as the agent install needs),
// and when that token ends.
func (b *reconcilerBase) localKubeconfig(ctx context.Context) ([]byte, time.Time, error) {
	sysNS := b.Opts.SystemNamespace
	if err := b.ensureBootstrapIdentity(ctx); err != nil {
		return nil, time.Time{}, err
	}
	seconds := int64(b.Opts.ImportTokenTTL / time.Second)
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	if err := b.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: bootstrapSA, Namespace: sysNS}}, tr); err != nil {
		return nil, time.Time{}, fmt.Errorf("requesting bootstrap token: %w", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: b.Config.Host, CertificateAuthorityData: b.caData()}
	kc.AuthInfos["local"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "local"}
	kc.CurrentContext = "local"
	out, err := clientcmd.Write(*kc)
	return out, tr.Status.ExpirationTimestamp.Time, err
}
