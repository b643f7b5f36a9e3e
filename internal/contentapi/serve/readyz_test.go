package serve

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetgo/fleet/internal/scheme"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestReadyCheck: the readiness check Setup returns (the manager's
// /readyz) fails, saying why, while the server cannot read the API
// server's request-header CA: here its user lacks the
// extension-apiserver-authentication-reader RoleBinding the chart gives
// fleet-controller in kube-system. Once the binding exists the server reads
// the CA by itself and the check passes, without a restart.
func TestReadyCheck(t *testing.T) {
	ctx := context.Background()
	const user, ns = "content-api-readyz", "readyz-system"
	// What the server needs besides the CA: its serving certificate's
	// Secret (and namespace).
	create := func(objs ...client.Object) {
		t.Helper()
		for _, o := range objs {
			if err := up.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	create(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "update"}},
	}}, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user}})

	cfg := rest.CopyConfig(up.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	check, err := Setup(ctx, mgr, Options{Addr: "127.0.0.1:0", Namespace: ns}, ns, false)
	if err != nil {
		t.Fatal(err)
	}
	probe := func() error { return check(httptest.NewRequest(http.MethodGet, "/readyz", nil)) }
	if err := probe(); err == nil {
		t.Fatal("ready before the server has started")
	}

	mctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Start(mctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	defer wg.Wait()
	defer cancel()

	// It has its certificate, then is refused the CA: not ready, and the
	// check says what it waits for and why.
	var notReady error
	fleettest.Eventually(t, time.Minute, func() error {
		notReady = probe()
		if notReady == nil {
			return nil
		}
		if !strings.Contains(notReady.Error(), "forbidden") {
			return errors.New("not refused the CA yet: " + notReady.Error())
		}
		return nil
	})
	if notReady == nil {
		t.Fatal("ready without the request-header CA")
	}
	if msg := notReady.Error(); !strings.Contains(msg, "request-header CA") || !strings.Contains(msg, authConfigMap) {
		t.Errorf("not-ready message %q does not say what is missing", msg)
	}

	// The chart's binding, added late: ready without a restart.
	create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: metav1.NamespaceSystem}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"}})
	fleettest.Eventually(t, time.Minute, probe)
}
