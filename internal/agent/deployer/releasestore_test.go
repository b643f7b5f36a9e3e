package deployer

import (
	"bytes"
	"context"
	"testing"
	"time"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestReleaseStoreWritesWhatHelmWrites stores the same revisions with Helm's
// Secrets driver and with releaseStore and compares the Secrets: same type,
// same labels but the timestamps, byte-identical data; and Helm reads back
// what releaseStore wrote.
func TestReleaseStoreWritesWhatHelmWrites(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	helmNS, ourNS := cs.CoreV1().Secrets("helm"), cs.CoreV1().Secrets("ours")
	helm, ours := driver.NewSecrets(helmNS), newReleaseStore(ourNS)
	rel := &release.Release{Name: "app", Namespace: "ns", Version: 3, Manifest: "kind: ConfigMap\n",
		Labels: map[string]string{"fleet.cattle.io/bundle-id": "b"},
		Info:   &release.Info{Status: rcommon.StatusPendingUpgrade, LastDeployed: time.Unix(100, 0).UTC()}}
	const key = "sh.helm.release.v1.app.v3"
	for round, write := range []func(*driver.Secrets, *releaseStore) (error, error){
		func(h *driver.Secrets, o *releaseStore) (error, error) { return h.Create(key, rel), o.Create(key, rel) },
		func(h *driver.Secrets, o *releaseStore) (error, error) {
			rel.Info.Status = rcommon.StatusDeployed
			return h.Update(key, rel), o.Update(key, rel)
		},
	} {
		if herr, oerr := write(helm, ours); herr != nil || oerr != nil {
			t.Fatalf("round %d: helm %v, ours %v", round, herr, oerr)
		}
		want, err := helmNS.Get(ctx, key, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := ourNS.Get(ctx, key, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Type != want.Type {
			t.Errorf("round %d: type %q, want %q", round, got.Type, want.Type)
		}
		if !bytes.Equal(got.Data["release"], want.Data["release"]) {
			t.Errorf("round %d: release data differs from Helm's", round)
		}
		for _, l := range []map[string]string{got.Labels, want.Labels} {
			delete(l, "createdAt")
			delete(l, "modifiedAt")
		}
		if len(got.Labels) != len(want.Labels) {
			t.Errorf("round %d: labels %v, want %v", round, got.Labels, want.Labels)
		}
		for k, v := range want.Labels {
			if got.Labels[k] != v {
				t.Errorf("round %d: label %s=%q, want %q", round, k, got.Labels[k], v)
			}
		}
		back, err := driver.NewSecrets(ourNS).Get(key)
		if err != nil {
			t.Fatalf("round %d: Helm reading our revision: %v", round, err)
		}
		r, _ := asV1(back)
		if r.Info.Status != rel.Info.Status || r.Manifest != rel.Manifest || r.Version != 3 {
			t.Errorf("round %d: Helm read back %+v", round, r)
		}
	}
	if err := ours.Create(key, rel); err != driver.ErrReleaseExists {
		t.Errorf("creating an existing revision: %v, want ErrReleaseExists", err)
	}
}
