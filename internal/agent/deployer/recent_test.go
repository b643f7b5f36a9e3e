package deployer

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestRecentExpires(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newRecent[int](10 * time.Second)
	r.now = func() time.Time { return now }
	r.put("a", 1)
	if v, ok := r.get("a"); !ok || v != 1 {
		t.Fatalf("get(a) = %v, %v right after put", v, ok)
	}
	now = now.Add(9 * time.Second)
	r.put("b", 2)
	if _, ok := r.get("a"); !ok {
		t.Fatal("a expired before maxAge")
	}
	now = now.Add(time.Second)
	if _, ok := r.get("a"); ok {
		t.Fatal("a still fresh at maxAge")
	}
	r.put("c", 3) // drops a
	if len(r.entries) != 2 {
		t.Fatalf("entries = %v, want b and c", r.entries)
	}
	r.forget("b")
	if _, ok := r.get("b"); ok {
		t.Fatal("b survived forget")
	}
}

// The default ServiceAccount is looked up once per LookupMaxAge, and a
// failed lookup fails the deploy instead of deploying as the agent.
func TestServiceAccountLookup(t *testing.T) {
	cs := fake.NewClientset(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "cattle-fleet-system", Name: DefaultServiceAccount}})
	gets := 0
	fail := false
	cs.PrependReactor("get", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if fail {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := &Deployer{agentNamespace: "cattle-fleet-system", core: cs.CoreV1(), defaultSA: newRecent[bool](LookupMaxAge)}
	d.defaultSA.now = func() time.Time { return now }

	for range 3 {
		sa, err := d.serviceAccount(t.Context(), "")
		if err != nil || sa != DefaultServiceAccount {
			t.Fatalf("serviceAccount = %q, %v", sa, err)
		}
	}
	if gets != 1 {
		t.Fatalf("%d GETs for 3 deploys within LookupMaxAge, want 1", gets)
	}
	if sa, err := d.serviceAccount(t.Context(), "restricted"); err != nil || sa != "restricted" {
		t.Fatalf("named account: %q, %v", sa, err)
	}
	now = now.Add(LookupMaxAge)
	fail = true
	if sa, err := d.serviceAccount(t.Context(), ""); err == nil {
		t.Fatalf("lookup failed but serviceAccount = %q, nil", sa)
	}
	fail = false
	if err := cs.CoreV1().ServiceAccounts("cattle-fleet-system").Delete(t.Context(), DefaultServiceAccount, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if sa, err := d.serviceAccount(t.Context(), ""); err != nil || sa != "" {
		t.Fatalf("after delete: %q, %v; want the agent's own identity", sa, err)
	}
}
