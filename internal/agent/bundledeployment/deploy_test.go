package bundledeployment_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

func listOpts(selector string) metav1.ListOptions { return metav1.ListOptions{LabelSelector: selector} }

func configMap(t *testing.T, ns, name string) (*corev1.ConfigMap, error) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := down.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm)
	return cm, err
}

func wantData(t *testing.T, ns, name, key, value string) {
	t.Helper()
	eventually(t, fmt.Sprintf("configmap %s/%s %s=%s", ns, name, key, value), func() error {
		cm, err := configMap(t, ns, name)
		if err != nil {
			return err
		}
		if cm.Data[key] != value {
			return fmt.Errorf("%s=%q", key, cm.Data[key])
		}
		return nil
	})
}

func wantGone(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, "configmap "+ns+"/"+name+" deleted", func() error {
		_, err := configMap(t, ns, name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
}

const rawCM = `apiVersion: v1
kind: ConfigMap
metadata:
  name: raw
data:
  color: blue
  template: "{{ not templated }}"
`

// Raw manifests with an overlay deploy into defaultNamespace, a new commit
// upgrades them, and deleting the BundleDeployment uninstalls them.
func TestRawManifestsDeployUpgradeUninstall(t *testing.T) {
	b := bundle{
		name: "raw",
		files: map[string]string{
			"cm.yaml":                       rawCM,
			"overlays/prod/cm_patch.yaml":   "data:\n  env: prod\n",
			"overlays/prod/extra.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\ndata:\n  a: b\n",
			"overlays/other/ignored.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ignored\n",
			"README.md":                     "not a manifest",
			".chart/abc/x/templates/x.yaml": "not: used",
		},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "raw-ns", YAML: &fleet.YAMLOptions{Overlays: []string{"prod"}}},
	}
	id := put(t, b)
	bd := waitState(t, "raw", id, fleet.Ready)
	wantData(t, "raw-ns", "raw", "env", "prod")
	wantData(t, "raw-ns", "raw", "template", "{{ not templated }}")
	wantData(t, "raw-ns", "extra", "a", "b")
	if _, err := configMap(t, "raw-ns", "ignored"); !apierrors.IsNotFound(err) {
		t.Fatalf("overlay not selected was deployed: %v", err)
	}
	if bd.Status.Release != "raw-ns/raw:1" {
		t.Fatalf("release = %q", bd.Status.Release)
	}
	for _, c := range []string{fleet.ConditionInstalled, fleet.ConditionDeployed, fleet.ConditionReady, fleet.ConditionMonitored} {
		if !meta.IsStatusConditionTrue(bd.Status.Conditions, c) {
			t.Fatalf("condition %s not true: %+v", c, bd.Status.Conditions)
		}
	}
	if bd.Status.ResourceCounts.DesiredReady != 2 || bd.Status.ResourceCounts.Ready != 2 || len(bd.Status.Resources) != 2 {
		t.Fatalf("resources %+v counts %+v", bd.Status.Resources, bd.Status.ResourceCounts)
	}

	// A new commit: the color changes, the overlay file goes.
	b.files["cm.yaml"] = strings.Replace(rawCM, "blue", "green", 1)
	delete(b.files, "overlays/prod/extra.yaml")
	id2 := put(t, b)
	bd = waitState(t, "raw", id2, fleet.Ready)
	wantData(t, "raw-ns", "raw", "color", "green")
	wantGone(t, "raw-ns", "extra")
	if bd.Status.Release != "raw-ns/raw:2" {
		t.Fatalf("release after upgrade = %q", bd.Status.Release)
	}

	// A third version: only maxHistory (default 2) revisions are kept.
	b.files["cm.yaml"] = strings.Replace(rawCM, "blue", "red", 1)
	id3 := put(t, b)
	bd = waitState(t, "raw", id3, fleet.Ready)
	wantData(t, "raw-ns", "raw", "color", "red")
	if bd.Status.Release != "raw-ns/raw:3" {
		t.Fatalf("release after second upgrade = %q", bd.Status.Release)
	}
	l, err := down.Clientset.CoreV1().Secrets("raw-ns").List(context.Background(), listOpts("owner=helm,name=raw"))
	must(t, err)
	if len(l.Items) != 2 {
		t.Fatalf("%d release revisions kept, want 2", len(l.Items))
	}

	deleteBD(t, "raw")
	wantGone(t, "raw-ns", "raw")
	eventually(t, "release storage removed", func() error {
		l, err := down.Clientset.CoreV1().Secrets("raw-ns").List(context.Background(), listOpts("owner=helm"))
		if err != nil || len(l.Items) != 0 {
			return fmt.Errorf("%d release secrets (err %v)", len(l.Items), err)
		}
		return nil
	})
}

// keepResources leaves the objects when the BundleDeployment goes.
func TestKeepResources(t *testing.T) {
	id := put(t, bundle{
		name:  "keep",
		files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\ndata:\n  k: v\n"},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "keep-ns", KeepResources: true},
	})
	waitState(t, "keep", id, fleet.Ready)
	deleteBD(t, "keep")
	eventually(t, "release storage removed", func() error {
		l, err := down.Clientset.CoreV1().Secrets("keep-ns").List(context.Background(), listOpts("owner=helm"))
		if err != nil || len(l.Items) != 0 {
			return fmt.Errorf("%d release secrets (err %v)", len(l.Items), err)
		}
		return nil
	})
	wantData(t, "keep-ns", "kept", "k", "v")
}

// A kustomization at the bundle root is built in memory.
func TestKustomize(t *testing.T) {
	id := put(t, bundle{
		name: "kust",
		files: map[string]string{
			"kustomization.yaml": "namePrefix: pre-\nresources:\n- base/cm.yaml\nconfigMapGenerator:\n- name: gen\n  literals:\n  - x=1\ngeneratorOptions:\n  disableNameSuffixHash: true\n",
			"base/cm.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: base\ndata:\n  b: c\n",
		},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "kust-ns"},
	})
	waitState(t, "kust", id, fleet.Ready)
	wantData(t, "kust-ns", "pre-base", "b", "c")
	wantData(t, "kust-ns", "pre-gen", "x", "1")
}

// A Helm chart stored in the bundle (as BUNDLES stores downloaded charts)
// with values from the values Secret. The values stand for what the
// manager merged from fleet.yaml and the cluster's targetCustomization.
func TestHelmChartWithValues(t *testing.T) {
	files := map[string]string{
		".chart/0123456789ab/demo/Chart.yaml":               "apiVersion: v2\nname: demo\nversion: 1.2.3\n",
		".chart/0123456789ab/demo/values.yaml":              "greeting: hello\nreplicas: 1\n",
		".chart/0123456789ab/demo/templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cfg\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  cluster: {{ .Values.cluster | quote }}\n",
	}
	opts := fleet.BundleDeploymentOptions{
		DefaultNamespace: "helm-ns",
		Helm: &fleet.HelmOptions{
			Chart: ".chart/0123456789ab/demo", ReleaseName: "demo-rel", Version: "1.2.3",
			Values: &fleet.GenericMap{Data: map[string]any{"greeting": "hi", "cluster": "customized-c1"}},
		},
	}
	id := put(t, bundle{name: "helm", files: files, opts: opts})
	bd := waitState(t, "helm", id, fleet.Ready)
	wantData(t, "helm-ns", "demo-rel-cfg", "greeting", "hi")
	wantData(t, "helm-ns", "demo-rel-cfg", "cluster", "customized-c1")
	if bd.Status.Release != "helm-ns/demo-rel:1" {
		t.Fatalf("release = %q", bd.Status.Release)
	}
	// New values (a new commit of fleet.yaml) upgrade the release.
	opts.Helm.Values.Data["greeting"] = "bonjour"
	id2 := put(t, bundle{name: "helm", files: files, opts: opts})
	waitState(t, "helm", id2, fleet.Ready)
	wantData(t, "helm-ns", "demo-rel-cfg", "greeting", "bonjour")
	deleteBD(t, "helm")
	wantGone(t, "helm-ns", "demo-rel-cfg")
}

// A CRD and a custom resource of it deploy in one pass.
func TestCRDAndCRInOneBundle(t *testing.T) {
	crd := crdYAML("example.com", "Widget")
	cr := "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n"
	id := put(t, bundle{name: "crd", files: map[string]string{"crd.yaml": crd, "widget.yaml": cr}, opts: fleet.BundleDeploymentOptions{DefaultNamespace: "crd-ns"}})
	bd := waitState(t, "crd", id, fleet.Ready)
	if bd.Status.ResourceCounts.DesiredReady != 2 {
		t.Fatalf("counts %+v", bd.Status.ResourceCounts)
	}
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("example.com/v1")
	w.SetKind("Widget")
	must(t, down.Client.Get(context.Background(), client.ObjectKey{Namespace: "crd-ns", Name: "w1"}, w))
	if size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); size != 3 {
		t.Fatalf("widget spec %v", w.Object["spec"])
	}

	// An upgrade that adds another CRD and a resource of it, in one pass too.
	gadgetCRD := crdYAML("example.com", "Gadget")
	id2 := put(t, bundle{name: "crd", files: map[string]string{
		"crd.yaml": crd, "widget.yaml": cr, "gcrd.yaml": gadgetCRD,
		"gadget.yaml": "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g1\n",
	}, opts: fleet.BundleDeploymentOptions{DefaultNamespace: "crd-ns"}})
	bd = waitState(t, "crd", id2, fleet.Ready)
	if bd.Status.ResourceCounts.DesiredReady != 4 {
		t.Fatalf("counts after upgrade %+v", bd.Status.ResourceCounts)
	}
	g := &unstructured.Unstructured{}
	g.SetAPIVersion("example.com/v1")
	g.SetKind("Gadget")
	must(t, down.Client.Get(context.Background(), client.ObjectKey{Namespace: "crd-ns", Name: "g1"}, g))
}

// With `namespace` set, a cluster-scoped object is refused with a clear
// error, and fixing the bundle deploys it.
func TestNamespaceEnforcement(t *testing.T) {
	b := bundle{
		name: "nsenforce",
		files: map[string]string{
			"ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: sneaky\n",
			"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: forced\n  namespace: elsewhere\n",
		},
		opts: fleet.BundleDeploymentOptions{TargetNamespace: "forced-ns"},
	}
	bad := put(t, b)
	eventually(t, "ErrApplied with message", func() error {
		bd := getBD(t, "nsenforce")
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
		if bd.Spec.DeploymentID != bad || bundledeployment.State(bd) != fleet.ErrApplied || c == nil || !strings.Contains(c.Message, "cluster-scoped") {
			return fmt.Errorf("status %+v", bd.Status)
		}
		return nil
	})
	delete(b.files, "ns.yaml")
	id := put(t, b)
	waitState(t, "nsenforce", id, fleet.Ready)
	wantData(t, "forced-ns", "forced", "", "")
}

// deleteNamespace removes the release namespace with the bundle. (The test
// cluster has no namespace controller, so the namespace stays Terminating.)
func TestDeleteNamespace(t *testing.T) {
	id := put(t, bundle{
		name:  "delns",
		files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "delns-ns", DeleteNamespace: true},
	})
	waitState(t, "delns", id, fleet.Ready)
	deleteBD(t, "delns")
	eventually(t, "namespace deleted", func() error {
		ns := &corev1.Namespace{}
		err := down.Client.Get(context.Background(), client.ObjectKey{Name: "delns-ns"}, ns)
		if apierrors.IsNotFound(err) || (err == nil && ns.DeletionTimestamp != nil) {
			return nil
		}
		return fmt.Errorf("namespace still active (err %v)", err)
	})
}
