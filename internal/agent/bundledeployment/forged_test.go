package bundledeployment_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/agent/deployer"
)

// forgery is a Helm storage Secret a downstream user writes to look like
// one of the agent's releases.
type forgery struct {
	release, bundleID string
	version           int
	manifest          string
	// hook is a pre-delete hook: what an uninstall of the release would
	// create, as the uninstalling identity.
	hook string
}

// tenant is a client of a downstream user who may only create Secrets in
// ns: nothing else, anywhere.
func tenant(t *testing.T, ns string) kubernetes.Interface {
	t.Helper()
	createNS(t, ns)
	user := "tenant-of-" + ns
	createObjects(t, down.Client,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "secret-writer", Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "secret-writer", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "secret-writer"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		})
	cfg := rest.CopyConfig(down.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	return cs
}

// forge writes f into ns as the tenant, in Helm's encoding and with the
// labels the agent puts on its own storage Secrets. The release asks for
// its namespace to be deleted with it and names no serviceAccount (the
// agent's own identity).
func forge(t *testing.T, as kubernetes.Interface, ns string, f forgery) {
	t.Helper()
	rel := &release.Release{
		Name: f.release, Namespace: ns, Version: f.version, Manifest: f.manifest,
		Info: &release.Info{Status: rcommon.StatusDeployed},
		Chart: &chart.Chart{Metadata: &chart.Metadata{APIVersion: "v2", Name: f.release, Version: "0.0.1", Annotations: map[string]string{
			fleet.BundleIDAnnotation: f.bundleID, fleet.AgentNamespaceAnnotation: agentNS, fleet.ServiceAccountAnnotation: "",
		}}},
	}
	if f.hook != "" {
		rel.Hooks = []*release.Hook{{Name: "hook", Kind: "ConfigMap", Path: "hook.yaml", Manifest: f.hook,
			Events: []release.HookEvent{release.HookPreDelete}}}
	}
	js, err := json.Marshal(rel)
	must(t, err)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, err = w.Write(js)
	must(t, err)
	must(t, w.Close())
	v := strconv.Itoa(f.version)
	_, err = as.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1." + f.release + ".v" + v, Labels: map[string]string{
			"owner": "helm", "name": f.release, "status": "deployed", "version": v,
			deployer.StorageBundleIDLabel: f.bundleID, deployer.StorageAgentNamespaceLbl: agentNS,
			deployer.StorageKeepResourcesLabel: "false", deployer.StorageDeleteNSLabel: "true",
		}},
		Type: "helm.sh/release.v1",
		Data: map[string][]byte{"release": []byte(base64.StdEncoding.EncodeToString(gz.Bytes()))},
	}, metav1.CreateOptions{})
	must(t, err)
}

// cmIn is a ConfigMap manifest in namespace ns.
func cmIn(ns, name string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\ndata:\n  k: v\n"
}

// victim creates a ConfigMap in kube-system, where no tenant may delete
// anything, and returns its UID.
func victim(t *testing.T, name string) types.UID {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}, Data: map[string]string{"k": "v"}}
	must(t, down.Client.Create(context.Background(), cm))
	return cm.UID
}

// survives fails the test unless every object of want still exists as
// the same object.
func survives(t *testing.T, what string, want map[string]types.UID, get func(name string) (metav1.Object, error)) {
	t.Helper()
	for name, uid := range want {
		o, err := get(name)
		if err != nil {
			t.Fatalf("object %s after %s: %v", name, what, err)
		}
		if o.GetUID() != uid || o.GetDeletionTimestamp() != nil {
			t.Fatalf("object %s was deleted (or is being deleted) by %s", name, what)
		}
	}
}

func kubeSystemCM(name string) (metav1.Object, error) {
	cm := &corev1.ConfigMap{}
	return cm, down.Client.Get(context.Background(), types.NamespacedName{Namespace: "kube-system", Name: name}, cm)
}

// notPlanted fails the test when a forged hook's object exists.
func notPlanted(t *testing.T, what, name string) {
	t.Helper()
	if _, err := configMap(t, "kube-system", name); !apierrors.IsNotFound(err) {
		t.Fatalf("after %s, kube-system/%s exists (err %v): the agent ran a forged release's hook", what, name, err)
	}
}

// captured is a logger that keeps every line.
type captured struct {
	mu    sync.Mutex
	lines []string
}

func (c *captured) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.lines = append(c.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
}

// mentioning returns the lines that contain every one of words.
func (c *captured) mentioning(words ...string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
next:
	for _, l := range c.lines {
		for _, w := range words {
			if !strings.Contains(l, w) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// wantLogged fails the test unless one garbage collection pass logs each
// of releases (namespace/name) as ignored, and unless no line quotes what
// only the forged Secrets' content holds.
func wantLogged(t *testing.T, releases []string, secretWords ...string) {
	t.Helper()
	var log captured
	must(t, bundledeployment.Collect(logr.NewContext(context.Background(), log.logger())))
	for _, r := range releases {
		l := log.mentioning(r)
		if len(l) == 0 {
			t.Errorf("garbage collection did not log the forged release %s; log:\n%s", r, strings.Join(log.lines, "\n"))
			continue
		}
		t.Logf("logged: %s", l[0])
	}
	for _, w := range secretWords {
		if l := log.mentioning(w); len(l) > 0 {
			t.Errorf("the log quotes the content of a storage Secret (%q): %s", w, l[0])
		}
	}
}

// A downstream user who may only create Secrets in their namespace forges
// Helm storage Secrets that look like the agent's: one for a
// BundleDeployment that never existed, and a revision of a real release
// in that namespace, also naming a BundleDeployment that does not exist.
// Garbage collection, which runs with the agent's cluster-wide rights,
// must act on neither: no object their manifests list is deleted (not the
// real release's ClusterRole and kube-system ConfigMap, not an unrelated
// kube-system ConfigMap), no pre-delete hook of theirs runs, the namespace
// they ask to delete stays; and each pass logs them without their content.
func TestForgedReleaseOfMissingBundleDeploymentNotCollected(t *testing.T) {
	ctx := context.Background()
	const ns = "forged-gc-tenant"
	as := tenant(t, ns)
	app := bundle{
		name: "forged-gc-app",
		files: map[string]string{
			"role.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: forged-gc-app-reader\n",
			"cm.yaml":   cmIn("kube-system", "forged-gc-app-cm"),
		},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: ns},
	}
	waitState(t, app.name, put(t, app), fleet.Ready)
	role := &rbacv1.ClusterRole{}
	must(t, down.Client.Get(ctx, types.NamespacedName{Name: "forged-gc-app-reader"}, role))
	appCM, err := configMap(t, "kube-system", "forged-gc-app-cm")
	must(t, err)
	unrelated := victim(t, "forged-gc-victim")

	forge(t, as, ns, forgery{release: "intruder", bundleID: "never-existed", version: 1,
		manifest: cmIn("kube-system", "forged-gc-victim"), hook: cmIn("kube-system", "forged-gc-planted")})
	forge(t, as, ns, forgery{release: app.name, bundleID: "never-existed-either", version: 99,
		manifest: app.files["role.yaml"] + "---\n" + app.files["cm.yaml"], hook: cmIn("kube-system", "forged-gc-planted-2")})

	// Two passes: the second would see what the first left.
	for range 2 {
		must(t, bundledeployment.Collect(ctx))
	}
	survives(t, "garbage collection", map[string]types.UID{"forged-gc-victim": unrelated, "forged-gc-app-cm": appCM.UID}, kubeSystemCM)
	survives(t, "garbage collection", map[string]types.UID{role.Name: role.UID}, func(n string) (metav1.Object, error) {
		r := &rbacv1.ClusterRole{}
		return r, down.Client.Get(ctx, types.NamespacedName{Name: n}, r)
	})
	notPlanted(t, "garbage collection", "forged-gc-planted")
	notPlanted(t, "garbage collection", "forged-gc-planted-2")
	namespaceActive(t, ns)
	if n := len(releaseSecrets(t, ns, "intruder")); n != 1 {
		t.Fatalf("the forged release has %d storage Secrets, want it left as it is", n)
	}
	wantLogged(t, []string{ns + "/intruder", ns + "/" + app.name}, "forged-gc-planted", "forged-gc-victim")

	// The real release is still the agent's: deleting its BundleDeployment
	// uninstalls it, and its objects only.
	deleteBD(t, app.name)
	waitNoReleaseSecrets(t, ns, app.name)
	wantGone(t, "kube-system", "forged-gc-app-cm")
	survives(t, "the clean-up", map[string]types.UID{"forged-gc-victim": unrelated}, kubeSystemCM)
	notPlanted(t, "the clean-up", "forged-gc-planted-2")
	namespaceActive(t, ns)
	must(t, down.Clientset.CoreV1().Secrets(ns).Delete(ctx, "sh.helm.release.v1.intruder.v1", metav1.DeleteOptions{}))
}

// The same user forges a release naming a BundleDeployment that exists
// (deployed into the user's namespace), and a newer "current" revision of
// that BundleDeployment's own release. Neither is the agent's: garbage
// collection does not uninstall the first as a release its
// BundleDeployment no longer claims, the next upgrade does not delete what
// the forged current revision lists (Helm deletes what the current
// revision has and the new one has not), and deleting the
// BundleDeployment removes its own release only.
func TestForgedReleaseOfExistingBundleDeploymentIgnored(t *testing.T) {
	ctx := context.Background()
	const ns = "forged-bd-tenant"
	as := tenant(t, ns)
	b := bundle{
		name:  "forged-bd",
		files: map[string]string{"cm.yaml": cmFile("forged-bd-cm", "v1")},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: ns},
	}
	waitState(t, b.name, put(t, b), fleet.Ready)
	victims := map[string]types.UID{
		"forged-bd-victim":   victim(t, "forged-bd-victim"),
		"forged-bd-victim-2": victim(t, "forged-bd-victim-2"),
	}

	forge(t, as, ns, forgery{release: "intruder", bundleID: b.name, version: 1,
		manifest: cmIn("kube-system", "forged-bd-victim"), hook: cmIn("kube-system", "forged-bd-planted")})
	forge(t, as, ns, forgery{release: b.name, bundleID: b.name, version: 99,
		manifest: cmIn("kube-system", "forged-bd-victim-2"), hook: cmIn("kube-system", "forged-bd-planted-2")})

	for range 2 {
		must(t, bundledeployment.Collect(ctx))
	}
	survives(t, "garbage collection", victims, kubeSystemCM)
	notPlanted(t, "garbage collection", "forged-bd-planted")
	namespaceActive(t, ns)

	b.files["cm.yaml"] = cmFile("forged-bd-cm", "v2")
	bd := waitState(t, b.name, put(t, b), fleet.Ready)
	wantData(t, ns, "forged-bd-cm", "k", "v2")
	survives(t, "an upgrade", victims, kubeSystemCM)
	if bd.Status.Release != ns+"/"+b.name+":2" {
		t.Fatalf("release %q, want revision 2: the forged revision 99 is not the agent's", bd.Status.Release)
	}

	deleteBD(t, b.name)
	wantGone(t, ns, "forged-bd-cm")
	waitNoReleaseSecrets(t, ns, b.name)
	survives(t, "the clean-up", victims, kubeSystemCM)
	notPlanted(t, "the clean-up", "forged-bd-planted")
	notPlanted(t, "the clean-up", "forged-bd-planted-2")
	namespaceActive(t, ns)
	if n := len(releaseSecrets(t, ns, "intruder")); n != 1 {
		t.Fatalf("the forged release has %d storage Secrets, want it left as it is", n)
	}
	wantLogged(t, []string{ns + "/intruder"}, "forged-bd-planted", "forged-bd-victim")
	must(t, down.Clientset.CoreV1().Secrets(ns).Delete(ctx, "sh.helm.release.v1.intruder.v1", metav1.DeleteOptions{}))
}
