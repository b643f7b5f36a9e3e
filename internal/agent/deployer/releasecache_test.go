package deployer

import (
	"fmt"
	"sort"
	"testing"
	"time"

	ri "helm.sh/helm/v4/pkg/release"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// versions lists the revisions and statuses a query returned, sorted.
func versions(t *testing.T, rels []ri.Releaser) []string {
	t.Helper()
	var out []string
	for _, r := range rels {
		v, err := asV1(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s@%d", v.Info.Status, v.Version))
	}
	sort.Strings(out)
	return out
}

// TestReleaseSecretsAnswersLikeTheAPIServer runs an upgrade's storage calls
// through releaseSecrets and checks every answer against Helm's plain
// Secrets driver reading the same store, and that the release was listed
// once.
func TestReleaseSecretsAnswersLikeTheAPIServer(t *testing.T) {
	cs := fake.NewClientset()
	lists := 0
	cs.PrependReactor("list", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		return false, nil, nil
	})
	plain := storage.Init(driver.NewSecrets(cs.CoreV1().Secrets("ns")))
	// Revision 1 exists before the action starts; another release too.
	rel := func(name string, v int, st rcommon.Status) *release.Release {
		return &release.Release{Name: name, Namespace: "ns", Version: v,
			Info: &release.Info{Status: st, LastDeployed: time.Unix(int64(v), 0)}}
	}
	for _, r := range []*release.Release{rel("app", 1, rcommon.StatusDeployed), rel("other", 1, rcommon.StatusDeployed)} {
		if err := plain.Create(r); err != nil {
			t.Fatal(err)
		}
	}
	lists = 0

	cached := storage.Init(driver.NewSecrets(newReleaseSecrets(cs.CoreV1().Secrets("ns"))))
	cached.MaxHistory = 2
	same := func(step string, got, want []ri.Releaser, gotErr, wantErr error) {
		t.Helper()
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%s: error %v, want %v", step, gotErr, wantErr)
		}
		g, w := versions(t, got), versions(t, want)
		if len(g) != len(w) {
			t.Fatalf("%s: got %v, want %v", step, g, w)
		}
		for i := range g {
			if g[i] != w[i] {
				t.Fatalf("%s: got %v, want %v", step, g, w)
			}
		}
	}
	query := func(step string, labels map[string]string) {
		t.Helper()
		got, gerr := cached.Query(labels)
		counted := lists
		want, werr := plain.Query(labels) // the oracle's LISTs are not counted
		lists = counted
		same(step, got, want, gerr, werr)
	}
	byName := map[string]string{"name": "app", "owner": "helm"}
	deployed := map[string]string{"name": "app", "owner": "helm", "status": "deployed"}

	query("history", byName)
	query("deployed", deployed)
	// The upgrade stores revision 2 (pending), then supersedes 1 and
	// deploys 2; MaxHistory 2 keeps both.
	if err := cached.Create(rel("app", 2, rcommon.StatusPendingUpgrade)); err != nil {
		t.Fatal(err)
	}
	query("history after create", byName)
	query("deployed during the upgrade", deployed)
	if err := cached.Update(rel("app", 1, rcommon.StatusSuperseded)); err != nil {
		t.Fatal(err)
	}
	if err := cached.Update(rel("app", 2, rcommon.StatusDeployed)); err != nil {
		t.Fatal(err)
	}
	query("history after the upgrade", byName)
	query("deployed after the upgrade", deployed)
	if _, err := cached.Delete("app", 1); err != nil {
		t.Fatal(err)
	}
	query("history after a delete", byName)
	if lists != 1 {
		t.Fatalf("the action listed the release's Secrets %d times, want once", lists)
	}

	// helm list's selector (owner=helm only) is wider than the cached
	// one: it goes to the API server and sees the other release too.
	all, err := cached.Driver.List(func(ri.Releaser) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || lists != 2 {
		t.Fatalf("owner=helm list: %d releases with %d LISTs, want 2 releases and a second LIST", len(all), lists)
	}
}

func TestEqualitySelector(t *testing.T) {
	for _, tc := range []struct {
		opts metav1.ListOptions
		ok   bool
	}{
		{metav1.ListOptions{LabelSelector: "name=app,owner=helm"}, true},
		{metav1.ListOptions{LabelSelector: "owner=helm"}, true},
		{metav1.ListOptions{}, false},
		{metav1.ListOptions{LabelSelector: "owner!=helm"}, false},
		{metav1.ListOptions{LabelSelector: "owner in (helm)"}, false},
		{metav1.ListOptions{LabelSelector: "owner=helm", ResourceVersion: "5"}, false},
		{metav1.ListOptions{LabelSelector: "owner=helm", Limit: 10}, false},
	} {
		if _, ok := equalitySelector(tc.opts); ok != tc.ok {
			t.Errorf("%+v: ok %v, want %v", tc.opts, ok, tc.ok)
		}
	}
}
