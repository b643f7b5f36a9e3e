package install_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv"
)

// TestEveryGeneratedCRDIsKept names the CRD that lacks the annotation
// (a new kind without the +kubebuilder:metadata marker, see
// api/v1alpha1/groupversion_info.go) faster than the helm test below.
func TestEveryGeneratedCRDIsKept(t *testing.T) {
	entries, err := os.ReadDir(testenv.CRDDir())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "fleet.cattle.io_") {
			continue
		}
		n++
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(testenv.CRDDir(), e.Name()))), crd); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if got := crd.Annotations["helm.sh/resource-policy"]; got != "keep" {
			t.Errorf("%s (%s): helm.sh/resource-policy = %q, want keep", e.Name(), crd.Name, got)
		}
	}
	if n != len(crdNames(t)) || n == 0 {
		t.Fatalf("checked %d CRD files", n)
	}
}

// TestHelmUninstallAndUpgradeKeepFleetCRDs: with the real helm CLI,
// neither `helm uninstall fleet-crd` nor an upgrade to a chart that no
// longer has a CRD deletes a Fleet CRD, so the fleet's objects survive; a
// later `helm install fleet-crd` adopts the kept CRDs again.
//
// It runs in its own API server: the shared upstream keeps its fleet-crd
// release for the other tests.
func TestHelmUninstallAndUpgradeKeepFleetCRDs(t *testing.T) {
	cl, err := testenv.Start(testenv.Options{Name: "install-crd-keep", WithoutCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop() })
	checkCRDChartKeepsObjects(t, cl, filepath.Join(testenv.RepoRoot(), "charts", "fleet-crd"))
}

// checkCRDChartKeepsObjects installs chart as release fleet-crd, creates a
// GitRepo, uninstalls, installs again and upgrades to a copy of chart
// without the GitRepo CRD, checking after each step that every Fleet CRD
// is still served and the GitRepo is the same object.
func checkCRDChartKeepsObjects(t *testing.T, cl *testenv.Cluster, chart string) {
	t.Helper()
	ctx := context.Background()
	c := cl.Client
	helmCRD := func(args ...string) string {
		t.Helper()
		out, err := helm(t, append([]string{"--kubeconfig", cl.Kubeconfig, "-n", "cattle-fleet-system"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	helmCRD("install", "--create-namespace", "fleet-crd", chart)
	waitCRDsEstablished(t, c)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet-local"}}); err != nil {
		t.Fatal(err)
	}
	repo := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Name: "keep-me", Namespace: "fleet-local"},
		Spec:       fleet.GitRepoSpec{Repo: "https://git.example.com/fleet-examples", Paths: []string{"simple"}},
	}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}

	stillThere := func(step string) {
		t.Helper()
		for _, name := range crdNames(t) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				t.Fatalf("after %s: CRD %s: %v", step, name, err)
			}
			if crd.DeletionTimestamp != nil {
				t.Fatalf("after %s: CRD %s is being deleted", step, name)
			}
		}
		got := &fleet.GitRepo{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(repo), got); err != nil {
			t.Fatalf("after %s: GitRepo: %v", step, err)
		}
		if got.UID != repo.UID || got.Spec.Repo != repo.Spec.Repo {
			t.Fatalf("after %s: GitRepo is uid %s repo %q, want the one created (uid %s)", step, got.UID, got.Spec.Repo, repo.UID)
		}
	}

	out := helmCRD("uninstall", "fleet-crd")
	if !strings.Contains(out, "gitrepos.fleet.cattle.io") {
		t.Errorf("helm uninstall does not list the kept CRDs:\n%s", out)
	}
	stillThere("helm uninstall fleet-crd")
	if list := helmCRD("list", "-q"); strings.TrimSpace(list) != "" {
		t.Fatalf("releases left after uninstall: %q", list)
	}

	// The kept CRDs still carry the release's ownership metadata, so the
	// same release installs over them instead of refusing to.
	helmCRD("install", "fleet-crd", chart)
	stillThere("helm install fleet-crd over the kept CRDs")

	// An upgrade to a chart without a CRD removes it from the release
	// only: Helm reads the annotation on the live CRD and keeps it.
	smaller := t.TempDir()
	if err := os.CopyFS(smaller, os.DirFS(chart)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(smaller, "templates", "fleet.cattle.io_gitrepos.yaml")); err != nil {
		t.Fatal(err)
	}
	helmCRD("upgrade", "fleet-crd", smaller)
	if manifest := helmCRD("get", "manifest", "fleet-crd"); strings.Contains(manifest, "name: gitrepos.fleet.cattle.io") {
		t.Fatal("the upgraded release still has the GitRepo CRD; the test does not test the upgrade")
	}
	stillThere("helm upgrade to a chart without the GitRepo CRD")
}
