package target

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
)

// TestNamespaceSelectorRestriction checks how the GitRepoRestrictions'
// allowedTargetNamespaceSelector reaches each target's options: all
// restrictions' selectors merged (see TestNamespaceSelectorsCombine),
// overriding whatever the bundle or a target customization set, cleared
// when no restriction sets one, and an invalid selector stops the bundle.
func TestNamespaceSelectorRestriction(t *testing.T) {
	restriction := func(name string, s *metav1.LabelSelector) *fleet.GitRepoRestriction {
		return &fleet.GitRepoRestriction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws"}, AllowedTargetNamespaceSelector: s}
	}
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}}
	cases := []struct {
		name         string
		restrictions []*fleet.GitRepoRestriction
		bundleSel    *metav1.LabelSelector
		custSel      *metav1.LabelSelector
		want         *metav1.LabelSelector
		bundErr      string
	}{
		{name: "no restriction", want: nil},
		{name: "restriction without selector", restrictions: []*fleet.GitRepoRestriction{restriction("r", nil)}, want: nil},
		{name: "selector copied", restrictions: []*fleet.GitRepoRestriction{restriction("r", sel("team", "a"))}, want: sel("team", "a")},
		{name: "all merged", restrictions: []*fleet.GitRepoRestriction{restriction("z", sel("env", "prod")), restriction("b", nil), restriction("a", sel("team", "a"))}, want: sel("env", "prod", "team", "a")},
		{name: "bundle cannot override", restrictions: []*fleet.GitRepoRestriction{restriction("r", sel("team", "a"))}, bundleSel: &metav1.LabelSelector{}, custSel: sel("team", "b"), want: sel("team", "a")},
		{name: "bundle cannot fake one", bundleSel: sel("team", "b"), want: nil},
		{name: "invalid selector", restrictions: []*fleet.GitRepoRestriction{restriction("broken", bad)}, bundErr: `GitRepoRestriction broken: invalid allowedTargetNamespaceSelector`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := bundle("", []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{},
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{AllowedTargetNamespaceSelector: c.custSel}}}, nil)
			b.Spec.AllowedTargetNamespaceSelector = c.bundleSel
			got, err := Compute(Input{Bundle: b, ManifestID: "s-1", Clusters: infos(nil, cluster("a"), cluster("b")), Restrictions: c.restrictions})
			if c.bundErr != "" {
				var be *BundleError
				if !errors.As(err, &be) || !strings.Contains(err.Error(), c.bundErr) {
					t.Fatalf("want BundleError %q, got %v", c.bundErr, err)
				}
				return
			}
			if err != nil || len(got) != 2 {
				t.Fatalf("err=%v targets=%d", err, len(got))
			}
			for _, tg := range got {
				if tg.Err != nil {
					t.Fatalf("%s: %v", tg.Key(), tg.Err)
				}
				if !reflect.DeepEqual(tg.Options.AllowedTargetNamespaceSelector, c.want) {
					t.Errorf("%s: selector %v, want %v", tg.Key(), tg.Options.AllowedTargetNamespaceSelector, c.want)
				}
			}
		})
	}
}

// TestNamespaceSelectorKeepsDeploymentIDs proves the new option does not
// change the deploymentID of bundles without a selector (it is omitempty),
// while a selector does change it, so adding one redeploys through the agent's
// check.
func TestNamespaceSelectorKeepsDeploymentIDs(t *testing.T) {
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: "app"}
	legacy, err := manifest.DeploymentID("s-1", opts)
	if err != nil {
		t.Fatal(err)
	}
	// The ID is the hash of exactly the JSON the options had before the
	// field existed.
	sum := sha256.Sum256([]byte(`{"defaultNamespace":"app"}`))
	if want := "s-1:" + hex.EncodeToString(sum[:]); legacy != want {
		t.Fatalf("deploymentID %s, want %s", legacy, want)
	}
	b := bundle("", []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}, nil)
	b.Spec.BundleDeploymentOptions = opts
	got, err := Compute(Input{Bundle: b, ManifestID: "s-1", Clusters: infos(nil, cluster("a"))})
	if err != nil || len(got) != 1 {
		t.Fatalf("err=%v targets=%d", err, len(got))
	}
	if got[0].DeploymentID != legacy {
		t.Errorf("deploymentID without restrictions = %s, want %s", got[0].DeploymentID, legacy)
	}
	got, err = Compute(Input{Bundle: b, ManifestID: "s-1", Clusters: infos(nil, cluster("a")),
		Restrictions: []*fleet.GitRepoRestriction{{AllowedTargetNamespaceSelector: sel("team", "a")}}})
	if err != nil || len(got) != 1 {
		t.Fatalf("err=%v targets=%d", err, len(got))
	}
	if got[0].DeploymentID == legacy {
		t.Errorf("a selector must change the deploymentID")
	}
}
