package deployer

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/testenv"
)

// rancherChart is a bundle's chart as Rancher Fleet's agent deployed it:
// a Deployment, a Service and a ConfigMap whose data comes from values,
// each with the objectset label and annotation Rancher's post-renderer
// adds (the same values as the agent's: SetHash, SetID). A Deployment's
// generation changes with its annotations too.
func rancherChart(bdName, greeting string) map[string]string {
	set := "labels: {objectset.rio.cattle.io/hash: " + SetHash(bdName) + "}, annotations: {objectset.rio.cattle.io/id: " + SetID(bdName) + "}"
	return map[string]string{
		"chart/Chart.yaml":  "apiVersion: v2\nname: web\nversion: 0.1.0\n",
		"chart/values.yaml": "greeting: " + greeting + "\n",
		"chart/templates/deploy.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, ` + set + `}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: "nginx:1"}
`,
		"chart/templates/svc.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: web, " + set + "}\n" +
			"spec: {ports: [{port: 80}], selector: {app: web}}\n",
		"chart/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, " + set + "}\n" +
			"data: {greeting: {{ .Values.greeting | quote }}}\n",
	}
}

// installAsRancher installs files' chart as release ns/release the way
// Rancher Fleet's agent does for BundleDeployment bdName of an agent in
// agentNS: with the Helm SDK and Helm's own Secrets storage (no Fleet
// storage labels, no signature), the chart annotated with the bundle ID
// and agent namespace; server-side apply as Rancher Fleet on Helm 4,
// client-side as earlier releases on Helm 3.
func installAsRancher(t *testing.T, cfg *rest.Config, ns, release, bdName, agentNS string, files map[string]string, ssa bool) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := loader.LoadDir(filepath.Join(dir, "chart"))
	if err != nil {
		t.Fatal(err)
	}
	ch.Metadata.Annotations = map[string]string{fleet.BundleIDAnnotation: bdName, fleet.AgentNamespaceAnnotation: agentNS,
		fleet.ServiceAccountAnnotation: "", fleet.KeepResourcesAnnotation: "false"}
	disc, err := NewDiscovery(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ac := action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
	if err := ac.Init(newRESTGetter(cfg, ns, disc), ns, "secret"); err != nil {
		t.Fatal(err)
	}
	i := action.NewInstall(ac)
	i.ReleaseName, i.Namespace, i.CreateNamespace = release, ns, true
	i.ServerSideApply, i.ForceConflicts = ssa, ssa
	i.WaitStrategy, i.Timeout = kube.HookOnlyStrategy, time.Minute
	if _, err := i.RunWithContext(context.Background(), ch, nil); err != nil {
		t.Fatalf("installing as Rancher Fleet's agent: %v", err)
	}
}

// migrationUIDs are the UIDs of the chart's three objects in ns, and the
// Deployment's generation (a changed pod template would roll its pods).
func migrationUIDs(t *testing.T, d *Deployer, ns string) (map[string]types.UID, int64) {
	t.Helper()
	ctx := context.Background()
	down := downstream(t)
	dep, err := down.Clientset.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := d.core.Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := d.core.ConfigMaps(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]types.UID{"Deployment": dep.UID, "Service": svc.UID, "ConfigMap": cm.UID}, dep.Generation
}

// checkTakenOver asserts that the agent deployed the new greeting over the
// objects Rancher Fleet's agent created (the same UIDs: nothing was
// deleted or recreated; the Deployment's pod template unchanged, so no
// rollout) and that every stored revision of the release is
// now the agent's: signed, listed as its release, the current one.
func checkTakenOver(t *testing.T, d *Deployer, ns, release, bdName string, opts fleet.BundleDeploymentOptions, before map[string]types.UID, generation int64, wantVersion int) {
	t.Helper()
	ctx := context.Background()
	after, gen := migrationUIDs(t, d, ns)
	for kind, uid := range before {
		if after[kind] != uid {
			t.Errorf("%s web was recreated (uid %s, was %s)", kind, after[kind], uid)
		}
	}
	if gen != generation {
		t.Errorf("Deployment web changed its spec (generation %d, was %d): its pods would roll", gen, generation)
	}
	cm, err := d.core.ConfigMaps(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil || cm.Data["greeting"] != "hello from fleet-go" {
		t.Fatalf("ConfigMap after the takeover: %v (%v), want the agent's greeting", cm.Data, err)
	}
	revs := stored(t, d, ns, release)
	if len(revs) != wantVersion {
		t.Fatalf("%d revisions stored, want %d", len(revs), wantVersion)
	}
	for _, s := range revs {
		if s.Labels[SignatureLabel] == "" {
			t.Errorf("revision %s is not signed by the agent", s.Name)
		}
	}
	cur, err := d.Current(context.Background(), bdName, opts)
	if err != nil || cur == nil || cur.Version != wantVersion {
		t.Fatalf("current release %v (%v), want version %d", cur, err, wantVersion)
	}
	refs, err := d.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(releaseNames(refs), " "); got != ns+"/"+release+"@"+bdName {
		t.Fatalf("the agent's releases: %q", got)
	}
}

// Migrating from Rancher Fleet (docs/migration.md): a release Rancher
// Fleet's agent installed is refused by the agent's first deploy, naming
// its storage; once an operator deletes only its storage Secrets
// (kubectl delete secret -n <ns> -l owner=helm,name=<release>), the next
// deploy installs the release again and Helm adopts the running objects,
// which carry that release's ownership metadata, in place: the same UIDs,
// no downtime.
func TestRancherReleaseTakenOverByDeletingItsStorage(t *testing.T) {
	for _, tc := range []struct {
		name string
		ssa  bool
	}{{name: "server-side", ssa: true}, {name: "client-side", ssa: false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := downstream(t).Config
			agentNS, ns, bdName := "migr-del-"+tc.name+"-agent", "migr-del-"+tc.name, "web-"+tc.name
			opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{Chart: "chart"}}
			release := ReleaseName(bdName, opts)
			installAsRancher(t, cfg, ns, release, bdName, agentNS, rancherChart(bdName, "hello from rancher"), tc.ssa)
			d, err := New(cfg, agentNS)
			if err != nil {
				t.Fatal(err)
			}
			before, generation := migrationUIDs(t, d, ns)

			_, err = deployFiles(t, d, bdName, rancherChart(bdName, "hello from fleet-go"), opts)
			want := "release " + ns + "/" + release + " is stored in Secrets this agent did not write (sh.helm.release.v1." + release + ".v1)"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("first deploy over Rancher's release: %v, want %q", err, want)
			}

			// The operator step: only the release's storage goes.
			if err := d.core.Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: "owner=helm,name=" + release}); err != nil {
				t.Fatal(err)
			}
			if _, err := deployFiles(t, d, bdName, rancherChart(bdName, "hello from fleet-go"), opts); err != nil {
				t.Fatalf("deploy after the storage was removed: %v", err)
			}
			checkTakenOver(t, d, ns, release, bdName, opts, before, generation, 1)
		})
	}
}

// The alternative that keeps Rancher's history: storage Secrets created
// before the agent's adoption cutoff (its first signing key) are adopted
// by the first deploy of the BundleDeployment they belong to once they
// carry the agent's storage labels
// (kubectl label secret -n <ns> -l owner=helm,name=<release>
// fleet.cattle.io/agent-namespace=<agent ns> fleet.cattle.io/bundle-id=<bd>);
// the deploy is then an upgrade of Rancher's revision, in place.
func TestRancherReleaseAdoptedByLabellingItsStorage(t *testing.T) {
	ctx := context.Background()
	cfg := downstream(t).Config
	const agentNS, ns, bdName = "migr-label-agent", "migr-label", "web-label"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{Chart: "chart"}}
	release := ReleaseName(bdName, opts)
	installAsRancher(t, cfg, ns, release, bdName, agentNS, rancherChart(bdName, "hello from rancher"), true)
	d, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	before, generation := migrationUIDs(t, d, ns)
	// The agent's key (and so its cutoff) is created by its first deploy,
	// in a later second than Rancher's revision (creation times have
	// seconds): Rancher's agent was stopped before this one started.
	var latest time.Time
	for _, s := range stored(t, d, ns, release) {
		if s.CreationTimestamp.After(latest) {
			latest = s.CreationTimestamp.Time
		}
	}
	for !time.Now().After(latest.Add(time.Second)) {
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := deployFiles(t, d, bdName, rancherChart(bdName, "hello from fleet-go"), opts); err == nil || !strings.Contains(err.Error(), "did not write") {
		t.Fatalf("first deploy over Rancher's unlabelled release: %v", err)
	}

	// The operator step: label Rancher's revisions as the agent's.
	for _, s := range stored(t, d, ns, release) {
		s.Labels[StorageAgentNamespaceLbl] = agentNS
		s.Labels[StorageBundleIDLabel] = names.Limit(bdName, maxLabelValue)
		if _, err := d.core.Secrets(ns).Update(ctx, &s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rel, err := deployFiles(t, d, bdName, rancherChart(bdName, "hello from fleet-go"), opts)
	if err != nil {
		t.Fatalf("deploy after labelling Rancher's storage: %v", err)
	}
	if rel.Version != 2 {
		t.Fatalf("deployed %s, want an upgrade of Rancher's revision 1", rel)
	}
	checkTakenOver(t, d, ns, release, bdName, opts, before, generation, 2)
}

// rancherCRD is a CRD of group fleet.cattle.io as Rancher Fleet's
// fleet-crd chart ships it (in templates/, so Helm manages it like any
// object of the release).
func rancherCRD(plural, kind string) string { return rancherCRDIn("fleet.cattle.io", plural, kind) }

func rancherCRDIn(group, plural, kind string) string {
	return "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: " + plural + "." + group + "\n" +
		"spec:\n  group: " + group + "\n  names: {kind: " + kind + ", plural: " + plural + ", singular: " + strings.ToLower(kind) + "}\n" +
		"  scope: Namespaced\n  versions:\n  - name: v1alpha1\n    served: true\n    storage: true\n" +
		"    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n    subresources: {status: {}}\n"
}

// Migrating the CRDs (docs/migration.md): this project's fleet-crd chart
// upgrades Rancher Fleet's release of the same name and namespace in
// place. The CRDs both charts have are taken over (objects kept, same
// UIDs; Schedule among them since this project serves it); a CRD only
// Rancher's chart has (ImageScan, on old releases gitjob.cattle.io's GitJob) is deleted
// by Helm, and every object of its kind with it, unless it carries
// helm.sh/resource-policy: keep when the upgrade runs.
func TestFleetCRDChartUpgradesRancherRelease(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	helmBin := os.Getenv("FLEET_HELM_BIN")
	if helmBin == "" {
		helmBin = filepath.Join(testenv.RepoRoot(), "bin", "helm")
	}
	if _, err := os.Stat(helmBin); err != nil {
		t.Fatalf("helm CLI not found at %s: run 'make tools'", helmBin)
	}
	dyn, err := dynamic.NewForConfig(down.Config)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	helmCLI := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(helmBin, append(args, "--kubeconfig", down.Kubeconfig)...)
		cmd.Dir = testenv.RepoRoot()
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	rancher := filepath.Join(t.TempDir(), "fleet-crd")
	if err := os.MkdirAll(filepath.Join(rancher, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	crds := rancherCRD("gitrepos", "GitRepo") + "---\n" + rancherCRD("imagescans", "ImageScan") + "---\n" + rancherCRD("schedules", "Schedule") +
		"---\n" + rancherCRDIn("gitjob.cattle.io", "gitjobs", "GitJob")
	for name, content := range map[string]string{"Chart.yaml": "apiVersion: v2\nname: fleet-crd\nversion: 107.0.0\n",
		"templates/crds.yaml": crds} {
		if err := os.WriteFile(filepath.Join(rancher, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Rancher's release, installed as Helm 3 did (client-side).
	helmCLI("install", "fleet-crd", rancher, "-n", "cattle-fleet-system", "--create-namespace", "--server-side=false", "--wait")
	t.Cleanup(func() {
		_ = exec.Command(helmBin, "uninstall", "fleet-crd", "-n", "cattle-fleet-system", "--kubeconfig", down.Kubeconfig).Run()
		_ = dyn.Resource(crdGVR).Delete(context.Background(), "imagescans.fleet.cattle.io", metav1.DeleteOptions{})
	})

	if _, err := down.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "crd-migr"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kinds := []struct{ group, resource, kind string }{{group: "fleet.cattle.io", resource: "gitrepos", kind: "GitRepo"},
		{group: "fleet.cattle.io", resource: "imagescans", kind: "ImageScan"}, {group: "fleet.cattle.io", resource: "schedules", kind: "Schedule"},
		{group: "gitjob.cattle.io", resource: "gitjobs", kind: "GitJob"}}
	uids := map[schema.GroupVersionResource]types.UID{}
	for _, o := range kinds {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": o.group + "/v1alpha1", "kind": o.kind,
			"metadata": map[string]any{"name": "x", "namespace": "crd-migr"}, "spec": map[string]any{}}}
		gvr := schema.GroupVersionResource{Group: o.group, Version: "v1alpha1", Resource: o.resource}
		var created *unstructured.Unstructured
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			created, err = dyn.Resource(gvr).Namespace("crd-migr").Create(ctx, obj, metav1.CreateOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("creating a %s: %v", o.kind, err)
		}
		uids[gvr] = created.GetUID()
	}

	// The operator step: keep what only Rancher's chart has (here only
	// ImageScan, to show what happens to the other one).
	if _, err := dyn.Resource(crdGVR).Patch(ctx, "imagescans.fleet.cattle.io", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"helm.sh/resource-policy":"keep"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	helmCLI("upgrade", "fleet-crd", "charts/fleet-crd", "-n", "cattle-fleet-system")

	gitrepos, err := dyn.Resource(crdGVR).Get(ctx, "gitrepos.fleet.cattle.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(gitrepos.Object, "spec", "versions")
	if cols, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "additionalPrinterColumns"); len(cols) == 0 {
		t.Errorf("the GitRepo CRD is still Rancher's: no printer columns")
	}
	for gvr, uid := range uids {
		got, err := dyn.Resource(gvr).Namespace("crd-migr").Get(ctx, "x", metav1.GetOptions{})
		switch {
		case gvr.Resource == "gitjobs":
			// A deleted CRD goes once the API server removed its objects.
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				_, err := dyn.Resource(crdGVR).Get(ctx, "gitjobs.gitjob.cattle.io", metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
			if err != nil {
				t.Errorf("the GitJob CRD without keep is still there: want it deleted by the upgrade, with its objects")
			}
		case err != nil:
			t.Errorf("%s x after the upgrade: %v", gvr.Resource, err)
		case got.GetUID() != uid:
			t.Errorf("%s x was recreated", gvr.Resource)
		}
	}
	if out := helmCLI("history", "fleet-crd", "-n", "cattle-fleet-system"); !strings.Contains(out, "fleet-crd-0.1.0") {
		t.Errorf("release history after the upgrade:\n%s", out)
	}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
