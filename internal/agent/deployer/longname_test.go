package deployer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// named is a valid object name of n characters starting with prefix.
func named(prefix string, n int) string {
	return prefix + strings.Repeat("x", n-len(prefix))
}

// Every label names.Limit cuts a BundleDeployment name to (any length a
// Kubernetes name may have, with or without a "-" where the cut falls) is
// taken as possibly cut; names that fit a label without the look of a cut
// are not, so they cost no decoding.
func TestMayBeCutName(t *testing.T) {
	for n := maxLabelValue + 1; n <= 253; n++ {
		for _, prefix := range []string{"bd-", strings.Repeat("a", 56) + "-"} {
			label := names.Limit(named(prefix, n), maxLabelValue)
			if len(label) > maxLabelValue || !mayBeCutName(label) {
				t.Fatalf("cut %q (from %d characters) not recognized", label, n)
			}
		}
	}
	for _, label := range []string{"", "app", named("bd-", 61), named("bd-", 63), named("bd-", 57) + "-ABCDE", named("bd-", 55) + "-abcde"} {
		if mayBeCutName(label) {
			t.Errorf("%q (%d characters) taken as a cut name", label, len(label))
		}
	}
}

// fullBundleDeployment is what Releases makes of storage Secret s, a
// revision the agent signed, and its storage label.
func fullBundleDeployment(s *corev1.Secret, label string) (name, unresolved string) {
	rel, err := decodeStored(s.Data["release"])
	if err != nil {
		return "", label
	}
	return resolveCut(chartBundleID(rel), label)
}

// The full name is read from a stored revision in Helm's encodings (gzip,
// and plain JSON from before Helm compressed), and a revision that does
// not confirm the label leaves it unresolved.
func TestFullBundleDeploymentFromRevision(t *testing.T) {
	full := named("bd-", 100)
	label := names.Limit(full, maxLabelValue)
	rel := func(ann map[string]string) *release.Release {
		return &release.Release{Name: "r", Namespace: "ns", Version: 1, Info: &release.Info{},
			Chart: &chart.Chart{Metadata: &chart.Metadata{Name: "c", Annotations: ann}}}
	}
	gz, err := secretOf("k", rel(map[string]string{fleet.BundleIDAnnotation: full}), "createdAt")
	if err != nil {
		t.Fatal(err)
	}
	if name, unresolved := fullBundleDeployment(gz, label); name != full || unresolved != "" {
		t.Errorf("gzip revision: %q, unresolved %q", name, unresolved)
	}
	js, err := json.Marshal(rel(map[string]string{fleet.BundleIDAnnotation: full}))
	if err != nil {
		t.Fatal(err)
	}
	plain := gz.DeepCopy()
	plain.Data["release"] = []byte(base64.StdEncoding.EncodeToString(js))
	if name, unresolved := fullBundleDeployment(plain, label); name != full || unresolved != "" {
		t.Errorf("uncompressed revision: %q, unresolved %q", name, unresolved)
	}

	other, err := secretOf("k", rel(map[string]string{fleet.BundleIDAnnotation: named("other-", 100)}), "createdAt")
	if err != nil {
		t.Fatal(err)
	}
	none, err := secretOf("k", rel(nil), "createdAt")
	if err != nil {
		t.Fatal(err)
	}
	garbage := gz.DeepCopy()
	garbage.Data["release"] = []byte("not base64!")
	for _, c := range []struct {
		what   string
		secret *corev1.Secret
	}{
		{what: "another name", secret: other},
		{what: "no annotation", secret: none},
		{what: "unreadable", secret: garbage},
	} {
		if name, unresolved := fullBundleDeployment(c.secret, label); name != "" || unresolved != label {
			t.Errorf("%s: %q, unresolved %q; want none and %q", c.what, name, unresolved, label)
		}
	}
}

// Releases names each release's BundleDeployment in full, also when the
// name is longer than its storage label may be, and when the label is
// exactly 63 characters that look like a cut. A label its release does
// not confirm is reported unresolved, with no BundleDeployment.
func TestReleasesNamesLongBundleDeployments(t *testing.T) {
	ctx := context.Background()
	d, err := New(downstream(t).Config, "releases-longname-agent")
	if err != nil {
		t.Fatal(err)
	}
	const ns = "releases-longname-ns"
	bds := []string{
		"short-bd",
		named("bd-63-", 57) + "-abcde",
		named("bd-70-", 70),
		strings.Repeat("d", 56) + "-" + strings.Repeat("e", 30),
		named("bd-253-", 253),
	}
	want := map[string]string{}
	for i, bd := range bds {
		cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-" + string(rune('a'+i)) + "\n"
		rel, err := deployFiles(t, d, bd, map[string]string{"cm.yaml": cm}, fleet.BundleDeploymentOptions{DefaultNamespace: ns})
		if err != nil {
			t.Fatalf("deploying %s: %v", bd, err)
		}
		want[rel.Name] = bd
	}
	refs, err := d.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != len(bds) {
		t.Fatalf("releases %+v, want %d", refs, len(bds))
	}
	for _, r := range refs {
		if r.BundleDeployment != want[r.Name] || r.Unresolved != "" {
			t.Errorf("release %s: bundledeployment %q (unresolved %q), want %q", r.Name, r.BundleDeployment, r.Unresolved, want[r.Name])
		}
	}

	// The 70-character one's label now cuts another name.
	long := ReleaseName(bds[2], fleet.BundleDeploymentOptions{})
	odd := names.Limit(named("someone-else-", 90), maxLabelValue)
	list, err := d.core.Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + long})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("release %s: %d revisions (%v)", long, len(list.Items), err)
	}
	sig, err := d.signer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		s.Labels[StorageBundleIDLabel] = odd
		// Signed again, as if the agent had written it so: a label
		// changed by anyone else makes it no release of the agent's.
		rel, err := decodeStored(s.Data["release"])
		if err != nil {
			t.Fatal(err)
		}
		if s.Labels[SignatureLabel], err = sig.signature(ns, rel, s.Labels, false); err != nil {
			t.Fatal(err)
		}
		if _, err := d.core.Secrets(ns).Update(ctx, &s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	refs, err = d.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range refs {
		if r.Name == long {
			found = true
			if r.BundleDeployment != "" || r.Unresolved != odd {
				t.Errorf("relabelled release: bundledeployment %q, unresolved %q; want none and %q", r.BundleDeployment, r.Unresolved, odd)
			}
		}
	}
	if !found {
		t.Errorf("relabelled release %s not listed: %+v", long, refs)
	}
}
