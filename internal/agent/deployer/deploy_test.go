package deployer

import (
	"context"
	"strconv"
	"strings"
	"testing"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

const chartYAML = "apiVersion: v2\nname: web\nversion: 0.1.0\n"

// webChart is a chart of one two-container Deployment with one replica, a
// Service and a pre-install hook.
var webChart = map[string]string{
	"chart/Chart.yaml":  chartYAML,
	"chart/values.yaml": "replicas: 1\n",
	"chart/templates/deploy.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1
      - name: sidecar
        image: proxy:1
`,
	"chart/templates/svc.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}], selector: {app: web}}\n",
	"chart/templates/hook.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-hook\n" +
		"  annotations: {helm.sh/hook: pre-install, helm.sh/hook-delete-policy: before-hook-creation}\n",
}

// TestChartWithKustomizeOverlay: a chart whose bundle has a kustomization
// at kustomize.dir is rendered by Helm and then run through that
// kustomization, as Rancher Fleet's post-renderer does (Fleet's
// multi-cluster/helm-kustomize example: a chart plus overlays/<env> with
// patchesStrategicMerge and no resources). The patched Deployment is what
// is deployed; a bundle without kustomize.dir gets the chart as is.
func TestChartWithKustomizeOverlay(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	files := map[string]string{
		"overlays/prod/kustomization.yaml": "patchesStrategicMerge:\n- deployment.yaml\n",
		"overlays/prod/deployment.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n" +
			"spec:\n  replicas: 3\n  template:\n    spec:\n      containers:\n      - name: web\n        image: nginx:2\n",
		"overlays/dev/kustomization.yaml": "namePrefix: dev-\n",
	}
	for k, v := range webChart {
		files[k] = v
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: "kust-prod", Helm: &fleet.HelmOptions{Chart: "chart"},
		Kustomize: &fleet.KustomizeOptions{Dir: "overlays/prod"}}
	if _, err := deployFiles(t, d, "kust-prod", files, opts); err != nil {
		t.Fatal(err)
	}
	dep, err := down.Clientset.AppsV1().Deployments("kust-prod").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := replicas(dep); r != 3 {
		t.Fatalf("replicas %d, want 3 from the overlay", r)
	}
	cs := dep.Spec.Template.Spec.Containers
	if len(cs) != 2 || cs[0].Image != "nginx:2" || cs[1].Image != "proxy:1" {
		t.Fatalf("containers %+v, want web patched to nginx:2 and the sidecar kept", cs)
	}
	if dep.Labels[SetHashLabel] != SetHash("kust-prod") {
		t.Errorf("the kustomized Deployment lacks the agent's label: %v", dep.Labels)
	}
	if _, err := down.Clientset.CoreV1().Services("kust-prod").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("the Service the overlay does not patch: %v", err)
	}
	if _, err := down.Clientset.CoreV1().ConfigMaps("kust-prod").Get(ctx, "web-hook", metav1.GetOptions{}); err != nil {
		t.Errorf("the chart's hook: %v", err)
	}

	// An upgrade goes through the overlay as well.
	files["overlays/prod/deployment.yaml"] = strings.Replace(files["overlays/prod/deployment.yaml"], "replicas: 3", "replicas: 4", 1)
	if _, err := deployFiles(t, d, "kust-prod", files, opts); err != nil {
		t.Fatal(err)
	}
	if dep, err = down.Clientset.AppsV1().Deployments("kust-prod").Get(ctx, "web", metav1.GetOptions{}); err != nil || replicas(dep) != 4 {
		t.Fatalf("after the upgrade: replicas %d (%v), want 4", replicas(dep), err)
	}

	// Another target's overlay renames: the chart's objects carry it.
	opts.DefaultNamespace, opts.Kustomize.Dir = "kust-dev", "overlays/dev"
	if _, err := deployFiles(t, d, "kust-dev", files, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := down.Clientset.AppsV1().Deployments("kust-dev").Get(ctx, "dev-web", metav1.GetOptions{}); err != nil {
		t.Fatalf("Deployment of overlays/dev: %v", err)
	}

	// kustomize.dir without a kustomization deploys the chart's output
	// unkustomized, as Rancher Fleet does (the bundle reader warns).
	opts.DefaultNamespace, opts.Kustomize.Dir = "kust-missing", "overlays/missing"
	if _, err := deployFiles(t, d, "kust-missing", files, opts); err != nil {
		t.Fatalf("kustomize.dir without a kustomization: %v", err)
	}
	if dep, err = down.Clientset.AppsV1().Deployments("kust-missing").Get(ctx, "web", metav1.GetOptions{}); err != nil || replicas(dep) == 3 {
		t.Fatalf("kustomize.dir without a kustomization: the chart's own Deployment, got replicas %d (%v)", replicas(dep), err)
	}

	// Without kustomize.dir (and no kustomization at the root) the chart
	// deploys unchanged.
	opts.DefaultNamespace, opts.Kustomize = "kust-none", nil
	if _, err := deployFiles(t, d, "kust-none", files, opts); err != nil {
		t.Fatal(err)
	}
	dep, err = down.Clientset.AppsV1().Deployments("kust-none").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if replicas(dep) != 1 || dep.Spec.Template.Spec.Containers[0].Image != "nginx:1" {
		t.Fatalf("chart without kustomize: replicas %d image %s", replicas(dep), dep.Spec.Template.Spec.Containers[0].Image)
	}
}

// replicas is a Deployment's spec.replicas, -1 when unset.
func replicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return -1
	}
	return *d.Spec.Replicas
}

// TestHelmDNS: Fleet renders charts with Helm's DNS lookups enabled unless
// helm.disableDNS is set, in which case getHostByName gives "" (Helm's
// engine without DNS).
func TestHelmDNS(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	files := map[string]string{
		"chart/Chart.yaml": chartYAML,
		"chart/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dns}\n" +
			"data:\n  host: {{ getHostByName \"localhost\" | quote }}\n",
	}
	for _, tc := range []struct {
		ns         string
		disableDNS bool
	}{{ns: "dns-on"}, {ns: "dns-off", disableDNS: true}} {
		opts := fleet.BundleDeploymentOptions{DefaultNamespace: tc.ns, Helm: &fleet.HelmOptions{Chart: "chart", DisableDNS: tc.disableDNS}}
		if _, err := deployFiles(t, d, tc.ns, files, opts); err != nil {
			t.Fatal(err)
		}
		cm, err := down.Clientset.CoreV1().ConfigMaps(tc.ns).Get(ctx, "dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if host := cm.Data["host"]; (host == "") != tc.disableDNS {
			t.Errorf("disableDNS=%v: getHostByName \"localhost\" rendered %q", tc.disableDNS, host)
		}
	}
}

// TestUninstallingReleaseReinstalled: a release whose last revision was
// left "uninstalling" (an uninstall interrupted) does not block its bundle
// with Helm's "has no deployed releases": as in Rancher Fleet, the history
// is purged and the bundle installed again.
func TestUninstallingReleaseReinstalled(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	cm := func(v string) map[string]string {
		return map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: u}\ndata: {a: \"" + v + "\"}\n"}
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: "uninstalling"}
	if _, err := deployFiles(t, d, "uninstalling", cm("1"), opts); err != nil {
		t.Fatal(err)
	}
	store := driver.NewSecrets(down.Clientset.CoreV1().Secrets("uninstalling"))
	key := "sh.helm.release.v1.uninstalling.v1"
	r, err := store.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	rel := r.(*release.Release)
	rel.Info.Status = rcommon.StatusUninstalling
	if err := store.Update(key, rel); err != nil {
		t.Fatal(err)
	}

	got, err := deployFiles(t, d, "uninstalling", cm("2"), opts)
	if err != nil {
		t.Fatalf("deploy over an uninstalling release: %v", err)
	}
	obj, err := down.Clientset.CoreV1().ConfigMaps("uninstalling").Get(ctx, "u", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if obj.Data["a"] != "2" {
		t.Fatalf("data %v, want a=2", obj.Data)
	}
	last, err := store.Get("sh.helm.release.v1.uninstalling.v" + strconv.Itoa(got.Version))
	if err != nil {
		t.Fatal(err)
	}
	if s := last.(*release.Release).Info.Status; s != rcommon.StatusDeployed {
		t.Fatalf("release %s is %s, want deployed", got, s)
	}
}
