package bundledeployment_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/testenv"
)

const (
	workspace   = "fleet-default"
	clusterName = "c1"
	saName      = "request-c1-agent"
	agentNS     = "cattle-fleet-system"
)

var (
	up, down  *testenv.Cluster
	clusterNS = names.ClusterNamespace(workspace, clusterName)
	contents  = map[string]bool{}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if up, err = testenv.Start(testenv.Options{Name: "agent-up"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer up.Stop()
	if down, err = testenv.Start(testenv.Options{Name: "agent-down", WithoutCRDs: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer down.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := startAgent(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// startAgent grants the agent credential of contract 3 upstream, the way
// registration does, and runs the agent component with it.
func startAgent(ctx context.Context) error {
	c := up.Client
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: saName, Namespace: clusterNS}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: saName, Namespace: clusterNS}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"bundledeployments"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"bundledeployments/status"}, Verbs: []string{"update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{saName}},
			// As registration grants. No manager runs here, so the API
			// server does not serve the content API: the agent falls back
			// to reading Contents directly, through the ClusterRole below
			// (the manager's mode with --content-api-addr=0).
			{APIGroups: []string{"content.fleet.cattle.io"}, Resources: []string{"bundlecontents"}, Verbs: []string{"get"}},
		}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: saName, Namespace: clusterNS},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: saName},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: saName, Namespace: clusterNS}},
		},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-content-" + clusterNS}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: saName + "-content"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "fleet-content-" + clusterNS},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: saName, Namespace: clusterNS}},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return err
		}
	}
	exp := int64(24 * 3600)
	tr, err := up.Clientset.CoreV1().ServiceAccounts(clusterNS).CreateToken(ctx, saName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	agentCfg := &rest.Config{
		Host: up.Config.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: up.Config.CAData}, QPS: 50, Burst: 100,
	}
	mgr, err := ctrl.NewManager(agentCfg, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{clusterNS: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	env := agent.Env{
		Upstream: mgr, Downstream: down.Config, ClusterNamespace: clusterNS,
		ClusterName: clusterName, Workspace: workspace, AgentNamespace: agentNS,
		CheckinInterval: time.Minute, Workers: 4,
	}
	if err := bundledeployment.Setup(ctx, bundledeployment.Options{
		Upstream: env.Upstream, Downstream: env.Downstream, ClusterNamespace: env.ClusterNamespace,
		AgentNamespace: env.AgentNamespace, Workers: env.Workers, GCInterval: 5 * time.Second,
	}); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "agent manager:", err)
		}
	}()
	return nil
}

// bundle is what the manager side (TARGETING) writes for one bundle, by hand
// here: a Content, a values Secret and a BundleDeployment (contract 5).
type bundle struct {
	name         string
	files        map[string]string
	opts         fleet.BundleDeploymentOptions
	dependsOn    []fleet.BundleRef
	correctDrift *fleet.CorrectDrift
}

// put creates or updates the bundle's upstream objects and returns the
// deploymentID the agent must apply.
func put(t *testing.T, b bundle) string {
	t.Helper()
	ctx := context.Background()
	var res []fleet.BundleResource
	for n, c := range b.files {
		res = append(res, fleet.BundleResource{Name: n, Content: c})
	}
	m, err := manifest.New(res)
	must(t, err)
	id, err := m.ID()
	must(t, err)
	data, err := m.Compressed()
	must(t, err)
	err = up.Client.Create(ctx, &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: id}, Content: data})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	allowContent(t, id)
	opts := *b.opts.DeepCopy()
	deploymentID, err := manifest.DeploymentID(id, opts)
	must(t, err)
	valuesHash := ""
	if opts.Helm != nil && opts.Helm.Values != nil {
		raw, err := json.Marshal(opts.Helm.Values.Data)
		must(t, err)
		d := sha256.Sum256(raw)
		valuesHash = hex.EncodeToString(d[:])
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: b.name, Namespace: clusterNS},
			Type:       fleet.SecretTypeBundleDeploymentOptions,
			Data:       map[string][]byte{"values": raw},
		}
		if err := up.Client.Update(ctx, s); apierrors.IsNotFound(err) {
			must(t, up.Client.Create(ctx, s))
		} else {
			must(t, err)
		}
		opts.Helm.Values = nil
	}
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		bd := &fleet.BundleDeployment{}
		err := up.Client.Get(ctx, client.ObjectKey{Namespace: clusterNS, Name: b.name}, bd)
		if apierrors.IsNotFound(err) {
			bd = &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: b.name, Namespace: clusterNS}}
		} else if err != nil {
			return err
		}
		bd.Labels = map[string]string{
			fleet.BundleLabel: b.name, fleet.BundleNamespaceLabel: workspace, fleet.ClusterLabel: clusterName,
			fleet.ClusterNamespaceLabel: clusterNS, fleet.ManagedLabel: "true", fleet.ContentNameLabel: id,
		}
		bd.Spec.DeploymentID = deploymentID
		// As the manager stages it when no rollout holds it back.
		bd.Spec.StagedDeploymentID = deploymentID
		bd.Spec.Options = opts
		bd.Spec.ValuesHash = valuesHash
		bd.Spec.DependsOn = b.dependsOn
		bd.Spec.CorrectDrift = b.correctDrift
		if bd.ResourceVersion == "" {
			return up.Client.Create(ctx, bd)
		}
		return up.Client.Update(ctx, bd)
	}))
	return deploymentID
}

// allowContent keeps ClusterRole fleet-content-<ns> listing exactly the
// Contents this cluster's BundleDeployments use (TARGETING's job).
func allowContent(t *testing.T, id string) {
	t.Helper()
	contents[id] = true
	var ids []string
	for k := range contents {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cr := &rbacv1.ClusterRole{}
		if err := up.Client.Get(context.Background(), client.ObjectKey{Name: "fleet-content-" + clusterNS}, cr); err != nil {
			return err
		}
		cr.Rules = []rbacv1.PolicyRule{{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"contents"}, Verbs: []string{"get"}, ResourceNames: ids}}
		return up.Client.Update(context.Background(), cr)
	}))
}

func deleteBD(t *testing.T, name string) {
	t.Helper()
	err := up.Client.Delete(context.Background(), &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: clusterNS}})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func getBD(t *testing.T, name string) *fleet.BundleDeployment {
	t.Helper()
	bd := &fleet.BundleDeployment{}
	must(t, up.Client.Get(context.Background(), client.ObjectKey{Namespace: clusterNS, Name: name}, bd))
	return bd
}

// eventually polls f until it returns nil (generous timeout: the machine is
// shared and loaded).
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

// waitApplied waits until the agent applied deploymentID and the status
// says Ready (or the given state).
func waitState(t *testing.T, name, deploymentID string, state fleet.BundleState) *fleet.BundleDeployment {
	t.Helper()
	var bd *fleet.BundleDeployment
	eventually(t, "bundledeployment "+name+" "+string(state), func() error {
		bd = getBD(t, name)
		if bd.Status.AppliedDeploymentID != deploymentID {
			return fmt.Errorf("applied %q, want %q; status %+v", bd.Status.AppliedDeploymentID, deploymentID, bd.Status.Conditions)
		}
		if s := bundledeployment.State(bd); s != state {
			return fmt.Errorf("state %s, want %s; status %+v", s, state, bd.Status)
		}
		return nil
	})
	return bd
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// crdYAML is a namespaced CRD of kind in group, version v1, whose objects
// may hold any fields (plural: the lower-cased kind plus "s").
func crdYAML(group, kind string) string {
	singular := strings.ToLower(kind)
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[3]ss.%[1]s
spec:
  group: %[1]s
  names: {kind: %[2]s, plural: %[3]ss, singular: %[3]s, listKind: %[2]sList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`, group, kind, singular)
}
