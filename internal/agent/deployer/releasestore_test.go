package deployer

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
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

// A held pending revision is not written by Create, reads back while held,
// is written once by its first Update, and one left held is written by
// flush as pending. A failed write of a held revision, which Helm would
// only log at the end of an install, is reported by flush.
func TestReleaseStoreHoldsPendingRevision(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	secrets := cs.CoreV1().Secrets("ns")
	store := newReleaseStore(secrets)
	store.holdPending = true
	rel := func(v int, status rcommon.Status) *release.Release {
		return &release.Release{Name: "app", Namespace: "ns", Version: v, Manifest: "kind: ConfigMap\n",
			Info: &release.Info{Status: status}}
	}
	stored := func(key string) string {
		s, err := secrets.Get(ctx, key, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return s.Labels["status"]
	}

	const v1 = "sh.helm.release.v1.app.v1"
	if err := store.Create(v1, rel(1, rcommon.StatusPendingInstall)); err != nil {
		t.Fatal(err)
	}
	if got := stored(v1); got == "pending-install" {
		t.Errorf("Create wrote the pending revision")
	}
	if back, err := store.Get(v1); err != nil || back.(*release.Release).Version != 1 {
		t.Errorf("Get of the held revision: %v, %v", back, err)
	}
	if err := store.Update(v1, rel(1, rcommon.StatusDeployed)); err != nil {
		t.Fatal(err)
	}
	if got := stored(v1); got != "deployed" {
		t.Errorf("after Update the revision is %q, want deployed", got)
	}
	if err := store.flush(); err != nil {
		t.Errorf("flush with nothing held: %v", err)
	}

	// Left held (the action returned without recording it): flush
	// writes it as Helm would have left it.
	const v2 = "sh.helm.release.v1.app.v2"
	if err := store.Create(v2, rel(2, rcommon.StatusPendingUpgrade)); err != nil {
		t.Fatal(err)
	}
	if err := store.flush(); err != nil {
		t.Fatal(err)
	}
	if got := stored(v2); got != "pending-upgrade" {
		t.Errorf("flushed revision %q, want pending-upgrade", got)
	}

	// A revision that is not pending is written at once.
	const v3 = "sh.helm.release.v1.app.v3"
	if err := store.Create(v3, rel(3, rcommon.StatusFailed)); err != nil {
		t.Fatal(err)
	}
	if got := stored(v3); got != "failed" {
		t.Errorf("a failed revision created: %q, want it written", got)
	}

	// The cluster refuses the write of a held revision.
	cs.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcd is full")
	})
	const v4 = "sh.helm.release.v1.app.v4"
	if err := store.Create(v4, rel(4, rcommon.StatusPendingUpgrade)); err != nil {
		t.Fatal(err)
	}
	if err := store.Update(v4, rel(4, rcommon.StatusDeployed)); err == nil {
		t.Error("Update of a held revision the cluster refused: no error")
	}
	if err := store.flush(); err == nil || !strings.Contains(err.Error(), "etcd is full") {
		t.Errorf("flush after a refused write: %v, want the refusal", err)
	}
}

// An Update that races the write of a held revision (Helm records a
// failure from a second goroutine when the context ends) waits for it and
// then updates the stored Secret, instead of failing to find it.
func TestReleaseStoreUpdateWaitsForHeldWrite(t *testing.T) {
	secrets := fake.NewClientset().CoreV1().Secrets("ns")
	slow := &slowCreate{SecretInterface: secrets, writing: make(chan struct{}), proceed: make(chan struct{})}
	store := newReleaseStore(slow)
	store.holdPending = true
	rel := func(status rcommon.Status) *release.Release {
		return &release.Release{Name: "app", Namespace: "ns", Version: 1, Info: &release.Info{Status: status}}
	}
	const key = "sh.helm.release.v1.app.v1"
	if err := store.Create(key, rel(rcommon.StatusPendingUpgrade)); err != nil {
		t.Fatal(err)
	}
	writing, proceed := slow.writing, slow.proceed
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- store.Update(key, rel(rcommon.StatusDeployed)) }()
	<-writing
	go func() { second <- store.Update(key, rel(rcommon.StatusFailed)) }()
	// Give the second Update time to reach the store; it must not finish
	// before the first has written the revision.
	var secondErr error
	secondDone := false
	select {
	case secondErr = <-second:
		secondDone = true
		t.Errorf("the second Update finished while the held revision was being written: %v", secondErr)
	case <-time.After(200 * time.Millisecond):
	}
	close(proceed)
	if err := <-first; err != nil {
		t.Errorf("first Update: %v", err)
	}
	if !secondDone {
		secondErr = <-second
	}
	if secondErr != nil {
		t.Errorf("second Update: %v", secondErr)
	}
	if s, err := secrets.Get(context.Background(), key, metav1.GetOptions{}); err != nil {
		t.Errorf("stored revision: %v", err)
	} else if s.Labels["status"] != "failed" {
		t.Errorf("stored revision has labels %v; want status failed", s.Labels)
	}
}

// slowCreate holds a Secret's creation until proceed is closed, and closes
// writing when the first one starts. (The fake clientset cannot: it runs
// every call under one lock.)
type slowCreate struct {
	typedcorev1.SecretInterface
	once             sync.Once
	writing, proceed chan struct{}
}

func (s *slowCreate) Create(ctx context.Context, secret *corev1.Secret, opts metav1.CreateOptions) (*corev1.Secret, error) {
	s.once.Do(func() { close(s.writing) })
	<-s.proceed
	return s.SecretInterface.Create(ctx, secret, opts)
}
