package install_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
)

// crdNames are the CRDs generated into charts/fleet-crd/templates.
func crdNames(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(testenv.CRDDir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutPrefix(e.Name(), "fleet.cattle.io_"); ok {
			out = append(out, strings.TrimSuffix(name, ".yaml")+".fleet.cattle.io")
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d CRDs in %s", len(out), testenv.CRDDir())
	}
	return out
}

// waitCRDsEstablished waits until every Fleet CRD serves in c.
func waitCRDsEstablished(t *testing.T, c client.Client) {
	t.Helper()
	for _, name := range crdNames(t) {
		eventually(t, 60*time.Second, func() error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: name}, crd); err != nil {
				return err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("CRD %s not established", name)
		})
	}
}

func TestHelmInstallManagerCharts(t *testing.T) {
	installManagerChart(t)
	ctx := context.Background()
	c := upstream.Client
	waitCRDsEstablished(t, c)

	// The CRDs serve: a Fleet object can be created and read back.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "helm-install-check"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cg := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns.Name}}
	if err := c.Create(ctx, cg); err != nil {
		t.Fatalf("creating a ClusterGroup after helm install fleet-crd: %v", err)
	}

	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "cattle-fleet-system", Name: "fleet-controller"}, dep); err != nil {
		t.Fatal(err)
	}
	ctr := dep.Spec.Template.Spec.Containers[0]
	args := strings.Join(ctr.Args, " ")
	if ctr.Command[0] != "fleet-controller" || dep.Spec.Template.Spec.ServiceAccountName != "fleet-controller" ||
		!strings.Contains(args, "--api-server-url="+upstream.Config.Host) || !strings.Contains(args, "--leader-elect=true") ||
		!strings.Contains(args, "--content-api-addr=:8443") || !strings.Contains(args, "--max-requests-in-flight=64") || !strings.Contains(args, "--helmops=true") {
		t.Fatalf("fleet-controller Deployment: command %v args %v sa %q", ctr.Command, ctr.Args, dep.Spec.Template.Spec.ServiceAccountName)
	}
	if sc := ctr.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Fatalf("controller container is not read-only: %+v", sc)
	}
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-controller", Namespace: "cattle-fleet-system"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fleet-controller", Namespace: "cattle-fleet-system"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gitjob", Namespace: "cattle-fleet-system"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "monitoring-fleet-controller", Namespace: "cattle-fleet-system"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "fleet-content-api", Namespace: "cattle-fleet-system"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-controller-auth-reader", Namespace: "kube-system"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-controller"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "fleet-controller-leader-election", Namespace: "cattle-fleet-system"}},
	} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatalf("%T %s: %v", obj, obj.GetName(), err)
		}
	}
	cr := &rbacv1.ClusterRole{}
	if err := c.Get(ctx, client.ObjectKey{Name: "fleet-controller"}, cr); err != nil {
		t.Fatal(err)
	}
	for _, r := range cr.Rules {
		if r.APIGroups[0] != "fleet.cattle.io" && (contains(r.Resources, "*") || contains(r.Verbs, "*") || contains(r.Verbs, "escalate") || contains(r.Verbs, "bind")) {
			t.Fatalf("controller ClusterRole is broader than needed: %+v", r)
		}
	}
	// The API server refuses a Role with a rule its writer does not hold
	// (the chart gives no escalate verb): fleet-controller, as the chart
	// binds it, must hold every rule it grants tokens and agents.
	asController := rest.CopyConfig(upstream.Config)
	asController.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:cattle-fleet-system:fleet-controller"}
	cc, err := client.New(asController, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	granted := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "granted-rules-check", Namespace: ns.Name}, Rules: registration.GrantedRules()}
	if err := cc.Create(ctx, granted); err != nil {
		t.Fatalf("the chart does not let fleet-controller grant the rules it grants: %v", err)
	}
	out, err := helm(t, "--kubeconfig", upstream.Kubeconfig, "-n", "cattle-fleet-system", "list", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var releases []struct{ Name, Status string }
	if err := json.Unmarshal([]byte(out), &releases); err != nil || len(releases) != 2 {
		t.Fatalf("helm list: %v %s", err, out)
	}
	for _, r := range releases {
		if r.Status != "deployed" {
			t.Fatalf("release %s is %s", r.Name, r.Status)
		}
	}
}

// helmInstallAgent runs the seed 004 command against the downstream
// cluster: the CA is passed like a kubeconfig's certificate-authority-data.
func helmInstallAgent(t *testing.T, values string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	caData := base64.StdEncoding.EncodeToString(upstream.Config.CAData)
	if _, err := helm(t, "--kubeconfig", downstream.Kubeconfig, "-n", "cattle-fleet-system", "install", "--create-namespace",
		"--values", path,
		"--set", "apiServerURL="+upstream.Config.Host,
		"--set", "apiServerCA="+caData,
		"--set-string", "labels.env=dev",
		"fleet-agent", "charts/fleet-agent"); err != nil {
		t.Fatal(err)
	}
}

// TestSeed004HelmInstallAgentRegisters: a token's values.yaml, the seed 004
// helm command against a downstream cluster, then the agent started with
// only what the chart created registers the cluster with the label.
func TestSeed004HelmInstallAgentRegisters(t *testing.T) {
	startManager(t)
	values := tokenValues(t, "token-seed004")
	tokenValue, err := install.ParseValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	helmInstallAgent(t, values)
	ctx := context.Background()
	c := downstream.Client

	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "cattle-fleet-system", Name: "fleet-agent-bootstrap"}, secret); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"apiServerURL":                upstream.Config.Host,
		"apiServerCA":                 string(upstream.Config.CAData),
		"token":                       tokenValue["token"].(string),
		"tokenName":                   "token-seed004",
		"clusterNamespace":            "fleet-default",
		"systemRegistrationNamespace": "cattle-fleet-clusters-system",
	}
	if len(secret.Data) != len(want) {
		t.Fatalf("bootstrap secret has keys %v", mapKeys(secret.Data))
	}
	for k, v := range want {
		if string(secret.Data[k]) != v {
			t.Fatalf("bootstrap secret %s = %q, want %q", k, secret.Data[k], v)
		}
	}

	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "cattle-fleet-system", Name: "fleet-agent"}, cm); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Labels                    map[string]string `json:"labels"`
		ClientID                  *string           `json:"clientID"`
		AgentTLSMode              string            `json:"agentTLSMode"`
		GarbageCollectionInterval string            `json:"garbageCollectionInterval"`
	}
	if err := json.Unmarshal([]byte(cm.Data["config"]), &cfg); err != nil {
		t.Fatalf("config %q: %v", cm.Data["config"], err)
	}
	if cfg.Labels["env"] != "dev" || len(cfg.Labels) != 1 || cfg.ClientID == nil || cfg.AgentTLSMode != "system-store" || cfg.GarbageCollectionInterval != "15m" {
		t.Fatalf("agent config = %s", cm.Data["config"])
	}

	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "cattle-fleet-system", Name: "fleet-agent"}, dep); err != nil {
		t.Fatal(err)
	}
	spec := dep.Spec.Template.Spec
	if spec.ServiceAccountName != "fleet-agent" || spec.Containers[0].Command[0] != "fleet-agent" || dep.Spec.Template.Labels["app"] != "fleet-agent" {
		t.Fatalf("fleet-agent Deployment: sa %q command %v labels %v", spec.ServiceAccountName, spec.Containers[0].Command, dep.Spec.Template.Labels)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Fatalf("agent pod may run as root: %+v", sc)
	}
	crb := &rbacv1.ClusterRoleBinding{}
	if err := c.Get(ctx, client.ObjectKey{Name: "cattle-fleet-system-fleet-agent-role-binding"}, crb); err != nil {
		t.Fatal(err)
	}
	if crb.Subjects[0].Name != "fleet-agent" || crb.Subjects[0].Namespace != "cattle-fleet-system" {
		t.Fatalf("agent binding subjects %+v", crb.Subjects)
	}

	// The agent, started with nothing but what the chart created, registers.
	runAgent(t, downstream)
	cluster := registeredCluster(t, downstream)
	if cluster.Labels["env"] != "dev" {
		t.Fatalf("registered cluster %s has labels %v, want env=dev", cluster.Name, cluster.Labels)
	}

	// A second install in another namespace is refused.
	path := filepath.Join(t.TempDir(), "values.yaml")
	_ = os.WriteFile(path, []byte(values), 0o600)
	if _, err := helm(t, "--kubeconfig", downstream.Kubeconfig, "-n", "other", "install", "--create-namespace", "--values", path, "fleet-agent", "charts/fleet-agent"); err == nil ||
		!strings.Contains(err.Error(), `must be installed in namespace "cattle-fleet-system"`) {
		t.Fatalf("install into namespace other: %v", err)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func mapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
