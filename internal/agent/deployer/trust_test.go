package deployer

import (
	"context"
	"encoding/base64"
	"maps"
	"strings"
	"testing"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// stored are the storage Secrets of release ns/name, as the API server
// has them.
func stored(t *testing.T, d *Deployer, ns, name string) []corev1.Secret {
	t.Helper()
	l, err := d.core.Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "owner=helm,name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func cmFile(name, value string) map[string]string {
	return map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  k: " + value + "\n"}
}

// releaseNames are the names of refs.
func releaseNames(refs []ReleaseRef) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Namespace+"/"+r.Name+"@"+r.BundleDeployment)
	}
	return out
}

// Every revision the agent writes is signed (install, upgrade, the
// revision an upgrade supersedes) with a key kept in its namespace: a
// restarted agent finds its releases and upgrades them. Helm's own
// storage driver rewriting a revision (a status change, as the helm CLI
// makes) leaves it the agent's.
func TestSignedStorageSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	const agentNS, ns = "trust-restart-agent", "trust-restart"
	cfg := downstream(t).Config
	d, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	for _, v := range []string{"v1", "v2"} {
		if _, err := deployFiles(t, d, "app", cmFile("app", v), opts); err != nil {
			t.Fatal(err)
		}
	}
	revs := stored(t, d, ns, "app")
	if len(revs) != 2 {
		t.Fatalf("%d revisions stored, want 2", len(revs))
	}
	for _, s := range revs {
		if s.Labels[SignatureLabel] == "" {
			t.Fatalf("revision %s (%s) is not signed", s.Name, s.Labels["status"])
		}
	}
	key, err := d.core.Secrets(agentNS).Get(ctx, SigningKeySecret, metav1.GetOptions{})
	if err != nil || len(key.Data[signingKeyField]) != signingKeyLen {
		t.Fatalf("signing key: %v", err)
	}

	restarted, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := restarted.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(releaseNames(refs), " "); got != ns+"/app@app" {
		t.Fatalf("releases after a restart: %s", got)
	}
	if cur, err := restarted.Current(context.Background(), "app", opts); err != nil || cur == nil || cur.Version != 2 {
		t.Fatalf("current release after a restart: %v (%v)", cur, err)
	}
	rel, err := deployFiles(t, restarted, "app", cmFile("app", "v3"), opts)
	if err != nil || rel.Version != 3 {
		t.Fatalf("upgrade after a restart: %v (%v)", rel, err)
	}

	helm := driver.NewSecrets(d.core.Secrets(ns))
	r, err := helm.Get("sh.helm.release.v1.app.v3")
	if err != nil {
		t.Fatal(err)
	}
	r.(*release.Release).Info.Description = "touched by helm"
	if err := helm.Update("sh.helm.release.v1.app.v3", r); err != nil {
		t.Fatal(err)
	}
	if cur, err := restarted.Current(context.Background(), "app", opts); err != nil || cur == nil || cur.Version != 3 {
		t.Fatalf("current release after Helm rewrote it: %v (%v)", cur, err)
	}
	if err := restarted.Uninstall(ctx, UninstallInput{ReleaseName: "app", Namespace: ns}); err != nil {
		t.Fatal(err)
	}
}

// A revision someone changed in place, keeping its signature label (as a
// user who may update Secrets in the release namespace can), is no longer
// the agent's: it is not listed, not the current release, not upgraded
// over, and uninstalling the release deletes nothing it lists.
func TestTamperedRevisionNotTrusted(t *testing.T) {
	ctx := context.Background()
	const ns = "trust-tamper"
	d, err := New(downstream(t).Config, "trust-tamper-agent")
	if err != nil {
		t.Fatal(err)
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	if _, err := deployFiles(t, d, "app", cmFile("mine", "v1"), opts); err != nil {
		t.Fatal(err)
	}
	victim := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "trust-tamper-victim", Namespace: "kube-system"}}
	if victim, err = d.core.ConfigMaps("kube-system").Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sec := stored(t, d, ns, "app")[0]
	rel, err := decodeStored(sec.Data["release"])
	if err != nil {
		t.Fatal(err)
	}
	rel.Manifest += "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: trust-tamper-victim\n  namespace: kube-system\n"
	data, err := encodeRelease(rel)
	if err != nil {
		t.Fatal(err)
	}
	sec.Data["release"] = data
	if _, err := d.core.Secrets(ns).Update(ctx, &sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	refs, err := d.Releases(ctx)
	if err != nil || len(refs) != 0 {
		t.Fatalf("releases %v (%v), want none", releaseNames(refs), err)
	}
	if cur, err := d.Current(context.Background(), "app", opts); err != nil || cur != nil {
		t.Fatalf("current release %v (%v), want none", cur, err)
	}
	// Upgrading would delete what the tampered revision has and the new
	// one has not.
	_, err = deployFiles(t, d, "app", cmFile("mine", "v2"), opts)
	if err == nil || !strings.Contains(err.Error(), "did not write") {
		t.Fatalf("deploy over the tampered release: %v", err)
	}
	if err := d.Uninstall(ctx, UninstallInput{ReleaseName: "app", Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if n := len(stored(t, d, ns, "app")); n != 0 {
		t.Fatalf("%d storage Secrets left", n)
	}
	cur, err := d.core.ConfigMaps("kube-system").Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil || cur.UID != victim.UID {
		t.Fatalf("what the tampered revision lists was deleted: %v", err)
	}
}

// Revisions stored before the adoption cutoff (by an agent of an earlier
// build, which neither signed nor recorded a cutoff) are kept but not
// trusted until a deploy of their BundleDeployment adopts them; unsigned
// ones written after the cutoff never are, and a first install does not go
// over them.
func TestLegacyStorageAdopted(t *testing.T) {
	ctx := context.Background()
	const agentNS, ns = "trust-legacy-agent", "trust-legacy"
	cfg := downstream(t).Config
	old, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	for _, bd := range []string{"kept-bd", "gone-bd"} {
		if _, err := deployFiles(t, old, bd, cmFile(bd, "v1"), opts); err != nil {
			t.Fatal(err)
		}
	}
	// kept-bd as an agent that did not sign stored it.
	var latest time.Time
	for _, bd := range []string{"kept-bd", "gone-bd"} {
		for _, s := range stored(t, old, ns, bd) {
			if bd == "kept-bd" {
				delete(s.Labels, SignatureLabel)
				if _, err := old.core.Secrets(ns).Update(ctx, &s, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if s.CreationTimestamp.Time.After(latest) {
				latest = s.CreationTimestamp.Time
			}
		}
	}
	// As the earlier build left things: no key, no cutoff. The new key is
	// created in a later second than every revision above (creation
	// times have seconds).
	for !time.Now().After(latest.Add(time.Second)) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := old.core.Secrets(agentNS).Delete(ctx, SigningKeySecret, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nsObj, err := old.core.Namespaces().Get(ctx, agentNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(nsObj.Annotations, SigningCutoffAnnotation)
	if _, err := old.core.Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := d.Releases(ctx)
	if err != nil || len(refs) != 0 {
		t.Fatalf("releases before adoption %v (%v), want none", releaseNames(refs), err)
	}

	// Written since the key exists, looking like the agent's: not adopted.
	late := &release.Release{Name: "late-bd", Namespace: ns, Version: 1, Info: &release.Info{Status: rcommon.StatusDeployed},
		Chart: &chart.Chart{Metadata: &chart.Metadata{APIVersion: "v2", Name: "late-bd", Version: "0.0.1", Annotations: map[string]string{
			fleet.BundleIDAnnotation: "late-bd", fleet.AgentNamespaceAnnotation: agentNS}}},
		Labels: map[string]string{StorageBundleIDLabel: "late-bd", StorageAgentNamespaceLbl: agentNS}}
	forged, err := secretOf("sh.helm.release.v1.late-bd.v1", late, "createdAt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.core.Secrets(ns).Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if cur, err := d.Current(context.Background(), "kept-bd", opts); err != nil || cur == nil || cur.Version != 1 {
		t.Fatalf("kept-bd not adopted: %v (%v)", cur, err)
	}
	if rel, err := deployFiles(t, d, "kept-bd", cmFile("kept-bd", "v2"), opts); err != nil || rel.Version != 2 {
		t.Fatalf("upgrading an adopted release: %v (%v)", rel, err)
	}
	if cur, err := d.Current(context.Background(), "late-bd", opts); err != nil || cur != nil {
		t.Fatalf("late-bd: %v (%v), want no release", cur, err)
	}
	if _, err := deployFiles(t, d, "late-bd", cmFile("late-bd", "v1"), opts); err == nil || !strings.Contains(err.Error(), "did not write") {
		t.Fatalf("installing over a release the agent did not write: %v", err)
	}
	refs, err = d.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// gone-bd's BundleDeployment never deploys it again: it stays
	// unadopted, and is never collected.
	if got := strings.Join(releaseNames(refs), " "); got != ns+"/kept-bd@kept-bd" {
		t.Fatalf("releases after adoption: %s", got)
	}
	for _, rel := range []string{"kept-bd", "gone-bd"} {
		if err := d.Uninstall(ctx, UninstallInput{ReleaseName: rel, Namespace: ns}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.core.Secrets(ns).Delete(ctx, forged.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// valuesFrom cannot read the agent's signing key into a release (and so
// into storage a user of the release namespace may read); the error does
// not quote it.
func TestValuesFromRefusesSigningKey(t *testing.T) {
	ctx := context.Background()
	d := newTestDeployer(t)
	if _, err := d.signer(ctx); err != nil {
		t.Fatal(err)
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: "trust-values", Helm: &fleet.HelmOptions{Chart: "chart",
		ValuesFrom: []fleet.ValuesFrom{{SecretKeyRef: &fleet.SecretKeySelector{Namespace: testAgentNamespace, Name: SigningKeySecret, Key: signingKeyField}}}}}
	_, err := deployFiles(t, d, "values-key", webChart, opts)
	if err == nil || !IsRenderError(err) {
		t.Fatalf("deploy with the signing key as values: %v", err)
	}
	key, kerr := d.core.Secrets(testAgentNamespace).Get(ctx, SigningKeySecret, metav1.GetOptions{})
	if kerr != nil {
		t.Fatal(kerr)
	}
	raw := key.Data[signingKeyField]
	if strings.Contains(err.Error(), string(raw)) || strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(raw)) {
		t.Fatal("the error quotes the key")
	}
}

// A revision verifies as it is read back from storage, whatever it holds:
// a manifest that is not valid UTF-8 (stored by JSON with U+FFFD for each
// bad byte), hooks that ran since, a status Helm changed. Changing what it
// lists, its chart's serviceAccount or a storage label breaks it.
func TestSignatureOfStoredRevision(t *testing.T) {
	sig := &signer{key: []byte(strings.Repeat("k", signingKeyLen))}
	const ns = "ns"
	rel := &release.Release{Name: "r", Namespace: ns, Version: 3, Info: &release.Info{Status: rcommon.StatusDeployed},
		Manifest: "kind: ConfigMap\ndata: {a: \"\xff\xfe ok \xe2\x82\"}\n",
		Hooks:    []*release.Hook{{Name: "h", Kind: "Job", Manifest: "kind: Job\n", Events: []release.HookEvent{release.HookPreDelete}}},
		Chart: &chart.Chart{Metadata: &chart.Metadata{APIVersion: "v2", Name: "r", Version: "1.0.0",
			Annotations: map[string]string{fleet.ServiceAccountAnnotation: "restricted"}}},
		Labels: map[string]string{StorageBundleIDLabel: "bd", StorageAgentNamespaceLbl: "agent"}}
	store := &releaseStore{sig: sig, namespace: ns}
	sec, err := secretOf("sh.helm.release.v1.r.v3", rel, "createdAt")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.sign(sec, rel); err != nil {
		t.Fatal(err)
	}
	read := func() *release.Release {
		t.Helper()
		r, err := decodeStored(sec.Data["release"])
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	back := read()
	if back.Manifest == rel.Manifest {
		t.Fatal("this test needs a manifest JSON does not store as is")
	}
	back.Hooks[0].LastRun = release.HookExecution{Phase: release.HookPhaseSucceeded}
	back.Info.Status = rcommon.StatusSuperseded
	if !sig.verify(ns, back, sec.Labels) {
		t.Fatal("the revision the agent signed does not verify as read back")
	}
	for what, change := range map[string]func(r *release.Release, l map[string]string){
		"manifest": func(r *release.Release, _ map[string]string) { r.Manifest += "---\nkind: Secret\n" },
		"hook":     func(r *release.Release, _ map[string]string) { r.Hooks[0].Manifest = "kind: ClusterRoleBinding\n" },
		"service account": func(r *release.Release, _ map[string]string) {
			r.Chart.Metadata.Annotations[fleet.ServiceAccountAnnotation] = ""
		},
		"version":         func(r *release.Release, _ map[string]string) { r.Version = 99 },
		"namespace label": func(_ *release.Release, l map[string]string) { l[StorageDeleteNSLabel] = "true" },
		"bundle label":    func(_ *release.Release, l map[string]string) { l[StorageBundleIDLabel] = "other" },
	} {
		r, l := read(), maps.Clone(sec.Labels)
		change(r, l)
		if sig.verify(ns, r, l) {
			t.Errorf("a revision whose %s changed still verifies", what)
		}
	}
	if sig.verify("other-ns", read(), sec.Labels) {
		t.Error("a revision copied to another namespace still verifies")
	}
	other := &signer{key: []byte(strings.Repeat("x", signingKeyLen))}
	if other.verify(ns, read(), sec.Labels) {
		t.Error("another key verifies the revision")
	}
}
