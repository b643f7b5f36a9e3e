package registration

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
//
// As Rancher Fleet's bootstrap (which re-applies its objects whenever the
// manager starts), every start converges what the chart configures:
//   - Cluster "local" carries name=local and Options.BootstrapClusterLabels
//     (name=local wins over a clusterLabels entry "name", so that
//     ClusterGroup "default" keeps selecting it). The labels are
//     server-side applied by field manager bootstrapFieldOwner: a value
//     changed by hand is set back, a key dropped from clusterLabels is
//     removed (unless another field manager set the same value too, and
//     so shares it), and labels users added by hand are left alone.
//     Entries that are not valid labels are left out with a Warning
//     Event (validLabels). The rest of
//     an existing Cluster "local" (its spec) and ClusterGroup "default" are
//     left as the user made them.
//   - GitRepo "bootstrap" (when Options.BootstrapRepo.Repo is set) is
//     server-side applied with the chart's repo, branch, paths and
//     clientSecretName, so that changing the chart values changes it on
//     the next start, as Rancher users expect; fields the chart does not
//     set (targets, pollingInterval, ...) stay as users made them. It is
//     never deleted: unsetting bootstrap.repo leaves it as it is, and a
//     GitRepo "bootstrap" deleted by hand comes back on the next start
//     while bootstrap.repo is set.
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
			warned = b.warnLocalCluster(ctx, ReasonBootstrapIdentityMissing, idErr.Error())
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
	if err := b.ensureLocalObjects(ctx); err != nil {
		return err
	}
	return kubeconfigErr
}

// bootstrapFieldOwner owns what the bootstrap server-side applies to
// objects users edit too (the labels of Cluster "local", GitRepo
// "bootstrap"). It is apart from fieldOwner so that a later start removes
// only what the bootstrap itself applied before and the chart no longer
// asks for (Rancher's bootstrap applies with set ID fleet-bootstrap).
const bootstrapFieldOwner = client.FieldOwner("fleet-bootstrap")

// defaultBootstrapBranch is the branch of GitRepo "bootstrap" when
// bootstrap.branch is empty (Rancher's chart default).
const defaultBootstrapBranch = "master"

// BootstrapRepo is the GitRepo "bootstrap" the fleet chart asks for, in
// the format of Rancher Fleet's chart values.
type BootstrapRepo struct {
	// Repo is the git URL (bootstrap.repo); empty means no GitRepo.
	Repo string
	// Secret is the GitRepo's clientSecretName (bootstrap.secret), a
	// Secret of the bootstrap namespace; empty means none.
	Secret string
	// Branch is the branch to follow (bootstrap.branch); empty means
	// master.
	Branch string
	// Paths is a comma-separated list of paths (bootstrap.paths); empty
	// means the repository root.
	Paths string
}

// ensureLocalObjects creates Cluster "local" and ClusterGroup "default"
// in the bootstrap namespace when they are missing, applies the labels
// of Cluster "local" and, when configured, GitRepo "bootstrap" (see
// Bootstrap for what is converged and what is left alone).
func (b *Bootstrap) ensureLocalObjects(ctx context.Context) error {
	ns := b.Opts.BootstrapNamespace
	// Created with name=local only, which no start ever removes: the
	// labels of clusterLabels must be owned by the apply below alone, or a
	// key later dropped from clusterLabels would stay.
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
	// What the chart configures comes after the objects users' targets
	// need, and the two applies do not wait for each other: neither a
	// label nor a GitRepo the API server refuses holds anything else back.
	labels, refused := validLabels(b.Opts.BootstrapClusterLabels)
	if len(refused) > 0 {
		msg := "bootstrap.clusterLabels: left out, not valid labels: " + strings.Join(refused, "; ")
		ctrl.Log.WithName("bootstrap").Info(msg)
		b.warnLocalCluster(ctx, ReasonInvalidBootstrapValues, msg)
	}
	err := applyBootstrapObject(ctx, b.Client, localClusterLabels(ns, labels))
	if b.Opts.BootstrapRepo.Repo != "" {
		err = errors.Join(err, applyBootstrapObject(ctx, b.Client, bootstrapGitRepo(ns, b.Opts.BootstrapRepo)))
	}
	return err
}

// validLabels is labels without the entries the API server would refuse
// on a Cluster, and a description of each left out. A bad value in the
// chart must not keep the bootstrap retrying for good (each attempt
// requests the local cluster's token again) while Cluster "local" lacks
// the valid ones.
func validLabels(labels map[string]string) (map[string]string, []string) {
	out := make(map[string]string, len(labels))
	var refused []string
	for k, v := range labels {
		errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...)
		if len(errs) > 0 {
			refused = append(refused, fmt.Sprintf("%s=%s: %s", k, v, strings.Join(errs, ", ")))
			continue
		}
		out[k] = v
	}
	sort.Strings(refused)
	return out, refused
}

// ReasonInvalidBootstrapValues is the reason of the Warning Event on
// Cluster "local" when chart values of the bootstrap are left out.
const ReasonInvalidBootstrapValues = "InvalidBootstrapValues"

// localClusterLabels is the apply configuration of the labels of Cluster
// "local" in ns: extra plus name=local, which wins over an extra "name".
// Nothing else of the Cluster is in it, so nothing else is touched.
func localClusterLabels(ns string, extra map[string]string) *unstructured.Unstructured {
	labels := make(map[string]string, len(extra)+1)
	maps.Copy(labels, extra)
	labels["name"] = fleet.LocalClusterName
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(fleet.GroupVersion.WithKind("Cluster"))
	u.SetNamespace(ns)
	u.SetName(fleet.LocalClusterName)
	u.SetLabels(labels)
	return u
}

// bootstrapGitRepo is the apply configuration of GitRepo "bootstrap" in
// ns: only the fields the chart sets, so that others users set stay.
func bootstrapGitRepo(ns string, r BootstrapRepo) *unstructured.Unstructured {
	spec := map[string]any{"repo": r.Repo, "branch": cmp.Or(r.Branch, defaultBootstrapBranch)}
	if r.Secret != "" {
		spec["clientSecretName"] = r.Secret
	}
	if paths := splitPaths(r.Paths); len(paths) > 0 {
		list := make([]any, len(paths))
		for i, p := range paths {
			list[i] = p
		}
		spec["paths"] = list
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(fleet.GroupVersion.WithKind("GitRepo"))
	u.SetNamespace(ns)
	u.SetName(bootstrapGitRepoName)
	return u
}

// bootstrapGitRepoName is Rancher Fleet's name of the bootstrap GitRepo.
const bootstrapGitRepoName = "bootstrap"

// splitPaths splits bootstrap.paths at commas, as Rancher Fleet does
// (blanks around a comma are dropped), and also drops empty entries
// (blanks around the list, a trailing comma), which Rancher would pass
// on as a path "".
func splitPaths(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// applyBootstrapObject server-side applies u as bootstrapFieldOwner,
// taking over fields another manager set (a value changed by hand is set
// back, as Rancher's bootstrap does on each start).
func applyBootstrapObject(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	//nolint:staticcheck // an apply configuration in an Unstructured is what we need here.
	if err := c.Patch(ctx, u, client.Apply, bootstrapFieldOwner, client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
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
