package registration

import (
	"cmp"
	"context"
	"encoding/json"
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
//     Event (validLabels).
//   - Cluster "local" carries spec.agentNamespace =
//     Options.BootstrapAgentNamespace, applied the same way (emptied, the
//     field the bootstrap set is removed), as Rancher's bootstrap sets it,
//     but never so as to move the agent installed before
//     (localAgentNamespace).
//     The rest of an existing Cluster "local" (its spec) and ClusterGroup
//     "default" are left as the user made them.
//   - GitRepo "bootstrap" (when Options.BootstrapRepo.Repo is set) is
//     server-side applied with the chart's repo, branch, paths and
//     clientSecretName, so that changing the chart values changes it on
//     the next start, as Rancher users expect; fields the chart does not
//     set (targets, pollingInterval, ...) stay as users made them. A
//     GitRepo "bootstrap" deleted by hand comes back on the next start
//     while bootstrap.repo is set. Unset, the GitRepo is deleted, as
//     Rancher's apply set deletes what it no longer holds, but only when
//     the bootstrap applied it (removeBootstrapGitRepo).
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
// and agent namespace of Cluster "local" and applies or removes GitRepo
// "bootstrap" (see Bootstrap for what is converged and what is left
// alone).
func (b *Bootstrap) ensureLocalObjects(ctx context.Context) error {
	ns := b.Opts.BootstrapNamespace
	// Created with name=local only, which no start ever removes: the
	// labels of clusterLabels must be owned by the apply below alone, or a
	// key later dropped from clusterLabels would stay. The agent namespace
	// is there from the start, though: the importer must never see the
	// new Cluster without it (should the apply below fail), or it would
	// install the agent in the system namespace, which the agent can then
	// never leave.
	cluster := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: fleet.LocalClusterName, Namespace: ns, Labels: map[string]string{"name": fleet.LocalClusterName}},
		Spec:       fleet.ClusterSpec{KubeConfigSecret: localKubeconfigSecret, AgentNamespace: b.newLocalAgentNamespace()},
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
		b.warnInvalidValues(ctx, "bootstrap.clusterLabels: left out, not valid labels: "+strings.Join(refused, "; "))
	}
	agentNS, err := b.localAgentNamespace(ctx)
	if err == nil {
		err = applyBootstrapObject(ctx, b.Client, localCluster(ns, labels, agentNS))
	}
	if b.Opts.BootstrapRepo.Repo != "" {
		return errors.Join(err, applyBootstrapObject(ctx, b.Client, bootstrapGitRepo(ns, b.Opts.BootstrapRepo)))
	}
	return errors.Join(err, b.removeBootstrapGitRepo(ctx))
}

// warnInvalidValues logs msg and records it on Cluster "local" as a
// Warning Event InvalidBootstrapValues.
func (b *Bootstrap) warnInvalidValues(ctx context.Context, msg string) {
	ctrl.Log.WithName("bootstrap").Info(msg)
	b.warnLocalCluster(ctx, ReasonInvalidBootstrapValues, msg)
}

// localAgentNamespace is the spec.agentNamespace the bootstrap applies to
// Cluster "local": Options.BootstrapAgentNamespace (empty: none). A value
// that is no namespace name, or one that would move the agent the manager
// installed (status.agentDeployedNamespace), is left out with a Warning
// Event; the value the bootstrap applied before is then applied again, so
// that neither a typo in the chart nor a values file of another
// installation moves or removes the local agent. A new installation
// (no agent recorded yet) gets the value.
func (b *Bootstrap) localAgentNamespace(ctx context.Context) (string, error) {
	want := b.Opts.BootstrapAgentNamespace
	cluster := &fleet.Cluster{}
	if err := b.Reader.Get(ctx, client.ObjectKey{Namespace: b.Opts.BootstrapNamespace, Name: fleet.LocalClusterName}, cluster); err != nil {
		return "", fmt.Errorf("reading local cluster: %w", err)
	}
	applied := appliedField(cluster.ManagedFields, bootstrapFieldOwner, "spec", "agentNamespace")
	previous := ""
	if applied {
		previous = cluster.Spec.AgentNamespace
	}
	if errs := validation.IsDNS1123Label(want); want != "" && len(errs) > 0 {
		b.warnInvalidValues(ctx, fmt.Sprintf("bootstrap.agentNamespace %.80q: left out, not a valid namespace name: %s", want, strings.Join(errs, ", ")))
		return previous, nil
	}
	if next := b.agentNamespaceAfter(cluster, want, applied); b.movesLocalAgent(cluster, next) {
		b.warnInvalidValues(ctx, fmt.Sprintf("bootstrap.agentNamespace %q: left out, the local agent keeps running in namespace %s: "+
			"moving an installed agent is not supported (the releases it deployed are signed by the agent of that namespace)",
			want, installedAgentNamespace(cluster)))
		return previous, nil
	}
	return want, nil
}

// newLocalAgentNamespace is the spec.agentNamespace Cluster "local" is
// created with: Options.BootstrapAgentNamespace when it is a namespace
// name (a new Cluster has no agent to move), else none; localAgentNamespace
// warns about a bad value.
func (b *Bootstrap) newLocalAgentNamespace() string {
	want := b.Opts.BootstrapAgentNamespace
	if len(validation.IsDNS1123Label(want)) > 0 {
		return ""
	}
	return want
}

// agentNamespaceAfter is the namespace cluster's agent is to run in once
// the bootstrap applied want: want, or, emptied, the manager's default when
// the bootstrap owned the field (applied) and the Cluster's own value
// when it did not.
func (b *Bootstrap) agentNamespaceAfter(cluster *fleet.Cluster, want string, applied bool) string {
	switch {
	case want != "":
		return want
	case applied:
		return b.Opts.SystemNamespace
	}
	return cmp.Or(cluster.Spec.AgentNamespace, b.Opts.SystemNamespace)
}

// movesLocalAgent says whether making next the agent namespace of
// cluster changes it away from the namespace its installed agent runs in
// (installedAgentNamespace; the importer refuses that move,
// refuseAgentMove).
func (b *Bootstrap) movesLocalAgent(cluster *fleet.Cluster, next string) bool {
	deployed := installedAgentNamespace(cluster)
	now := cmp.Or(cluster.Spec.AgentNamespace, b.Opts.SystemNamespace)
	return deployed != "" && next != now && next != deployed
}

// removeBootstrapGitRepo deletes GitRepo "bootstrap" of the bootstrap
// namespace (through its finalizer, which removes its Bundles) when the
// bootstrap applied it: bootstrapFieldOwner applied its
// bootstrapManagedAnnotation. One a user made, or one an earlier version
// applied without the annotation, is kept, and the log says why.
func (b *Bootstrap) removeBootstrapGitRepo(ctx context.Context) error {
	key := client.ObjectKey{Namespace: b.Opts.BootstrapNamespace, Name: bootstrapGitRepoName}
	repo := &fleet.GitRepo{}
	if err := b.Reader.Get(ctx, key, repo); err != nil {
		return client.IgnoreNotFound(err)
	}
	log := ctrl.Log.WithName("bootstrap").WithValues("namespace", key.Namespace, "gitrepo", key.Name)
	switch {
	case !repo.DeletionTimestamp.IsZero():
		return nil
	case !appliedField(repo.ManagedFields, bootstrapFieldOwner, "metadata", "annotations", bootstrapManagedAnnotation):
		log.Info("bootstrap.repo is empty, GitRepo kept: it was not applied by the bootstrap")
		return nil
	}
	// The UID precondition spares a GitRepo made anew meanwhile.
	if err := b.Client.Delete(ctx, repo, client.Preconditions{UID: &repo.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting GitRepo %s: %w", key, err)
	}
	log.Info("bootstrap.repo is empty, GitRepo deleted")
	return nil
}

// appliedField says whether manager's server-side apply owns the field at
// path (field names) of the object with managedFields.
func appliedField(managedFields []metav1.ManagedFieldsEntry, manager client.FieldOwner, path ...string) bool {
	for _, e := range managedFields {
		if e.Manager != string(manager) || e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if json.Unmarshal(e.FieldsV1.Raw, &fields) != nil {
			continue
		}
		for i, name := range path {
			next, ok := fields["f:"+name]
			if !ok {
				break
			}
			if i == len(path)-1 {
				return true
			}
			if fields, ok = next.(map[string]any); !ok {
				break
			}
		}
	}
	return false
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

// localCluster is the apply configuration of Cluster "local" in ns: its
// labels, extra plus name=local (which wins over an extra "name"), and
// spec.agentNamespace when agentNS is set. Nothing else of the Cluster is
// in it, so nothing else is touched.
func localCluster(ns string, extra map[string]string, agentNS string) *unstructured.Unstructured {
	labels := make(map[string]string, len(extra)+1)
	maps.Copy(labels, extra)
	labels["name"] = fleet.LocalClusterName
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if agentNS != "" {
		u.Object["spec"] = map[string]any{"agentNamespace": agentNS}
	}
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
	u.SetAnnotations(map[string]string{bootstrapManagedAnnotation: "true"})
	return u
}

// bootstrapManagedAnnotation marks GitRepo "bootstrap" as the bootstrap's
// own: only one whose annotation the bootstrap applied is deleted once
// bootstrap.repo is emptied. One applied by an earlier version, which set
// no annotation, is kept, as that version documented: emptying the value
// must not remove workloads by surprise at an upgrade.
const bootstrapManagedAnnotation = "fleet.cattle.io/bootstrap-managed"

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
