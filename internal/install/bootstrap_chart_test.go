package install_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
)

var (
	bootstrapChartOnce sync.Once
	bootstrapChartErr  error
	// bootstrapChartObjs are the objects of `fleet install controller`.
	bootstrapChartObjs []*unstructured.Unstructured
)

// applyControllerOutputToFresh applies `fleet install controller` (the
// fleet chart rendered with its defaults, bootstrap.enabled included) to
// the fresh cluster, once; no manager with admin rights runs there, so
// what exists is what the chart made.
func applyControllerOutputToFresh(t *testing.T) {
	t.Helper()
	bootstrapChartOnce.Do(func() {
		out, err := fleetCLI(t, "--kubeconfig", "/nonexistent/kubeconfig", "install", "controller")
		if err != nil {
			bootstrapChartErr = err
			return
		}
		if bootstrapChartObjs, bootstrapChartErr = install.Objects(out); bootstrapChartErr != nil {
			return
		}
		bootstrapChartErr = install.Apply(context.Background(), fresh.Client, bootstrapChartObjs)
	})
	if bootstrapChartErr != nil {
		t.Fatalf("applying `fleet install controller` to the fresh cluster: %v", bootstrapChartErr)
	}
	waitCRDsEstablished(t, fresh.Client)
}

// runRegistrationAsController runs the registration controllers and the
// local bootstrap against the fresh cluster with the rights the chart
// gives fleet-controller (its ServiceAccount impersonated), until the
// test ends.
func runRegistrationAsController(t *testing.T, opts registration.Options) {
	t.Helper()
	asController := rest.CopyConfig(fresh.Config)
	asController.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + fleet.DefaultSystemNamespace + ":fleet-controller"}
	mgr, err := ctrl.NewManager(asController, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := registration.Setup(ctx, mgr, opts); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("manager did not stop")
		}
	})
}

// TestChartInstalledManagerBootstrapsLocalCluster: with only the rights the
// fleet chart gives fleet-controller (no bind, no escalate), the manager
// bootstraps the local cluster: Cluster "local", ClusterGroup "default"
// and Secret local-cluster, whose kubeconfig authenticates as the chart's
// bootstrap ServiceAccount with the rights to install the agent.
func TestChartInstalledManagerBootstrapsLocalCluster(t *testing.T) {
	applyControllerOutputToFresh(t)
	runRegistrationAsController(t, registration.Options{
		BootstrapNamespace: fleet.BootstrapNamespace,
		APIServerURL:       fresh.Config.Host,
		APIServerCA:        fresh.Config.CAData,
		Workers:            2,
	})
	ctx := context.Background()
	c := fresh.Client
	ns := fleet.BootstrapNamespace

	secret := &corev1.Secret{}
	eventually(t, 90*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.LocalClusterName}, &fleet.Cluster{}); err != nil {
			return fmt.Errorf("cluster local: %w", err)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.DefaultClusterGroup}, &fleet.ClusterGroup{}); err != nil {
			return fmt.Errorf("cluster group default: %w", err)
		}
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "local-cluster"}, secret)
	})

	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["value"])
	if err != nil {
		t.Fatalf("kubeconfig of Secret local-cluster: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the local kubeconfig's token does not authenticate: %v", err)
	}
	if want := "system:serviceaccount:" + fleet.DefaultSystemNamespace + ":fleet-controller-bootstrap"; review.Status.UserInfo.Username != want {
		t.Fatalf("local kubeconfig authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}
	// What the agent install needs: cluster-wide RBAC writes, for one.
	if _, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the local kubeconfig's token may not list ClusterRoles: %v", err)
	}

	// And the import of Cluster "local" (the local agent) goes through.
	eventually(t, 90*time.Second, func() error {
		cluster := &fleet.Cluster{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.LocalClusterName}, cluster); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cluster.Status.Conditions, fleet.ConditionImported)
		if cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("cluster local not imported: %+v", cond)
		}
		return nil
	})
}

// TestChartBootstrapBindingMissingThenInstalled: when the bootstrap
// ClusterRoleBinding is missing and fleet-controller may not create it,
// Cluster "local" and ClusterGroup "default" are created all the same,
// Cluster "local" says what to install (a Warning Event) and is not
// imported; once an admin creates the binding, the bootstrap goes on by
// itself, and leaves the admin's binding as it is.
func TestChartBootstrapBindingMissingThenInstalled(t *testing.T) {
	applyControllerOutputToFresh(t)
	ctx := context.Background()
	c := fresh.Client
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-controller-bootstrap"}}
	if err := c.Delete(ctx, binding); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// What the chart installs, for the other tests.
		_ = c.Delete(ctx, binding)
		if err := install.Apply(ctx, c, bootstrapChartObjs); err != nil {
			t.Errorf("re-applying the chart: %v", err)
		}
	})
	ns := "bootstrap-nobinding"
	runRegistrationAsController(t, registration.Options{
		BootstrapNamespace: ns,
		APIServerURL:       fresh.Config.Host,
		APIServerCA:        fresh.Config.CAData,
		Workers:            2,
	})

	eventually(t, 90*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.DefaultClusterGroup}, &fleet.ClusterGroup{}); err != nil {
			return fmt.Errorf("cluster group default: %w", err)
		}
		cluster := &fleet.Cluster{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.LocalClusterName}, cluster); err != nil {
			return fmt.Errorf("cluster local: %w", err)
		}
		cond := meta.FindStatusCondition(cluster.Status.Conditions, fleet.ConditionImported)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "KubeconfigSecretMissing" {
			return fmt.Errorf("cluster local Imported condition %+v, want False/KubeconfigSecretMissing", cond)
		}
		events := &corev1.EventList{}
		if err := c.List(ctx, events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == fleet.LocalClusterName && e.Type == corev1.EventTypeWarning && e.Reason == registration.ReasonBootstrapIdentityMissing &&
				strings.Contains(e.Message, "ClusterRoleBinding fleet-controller-bootstrap is missing and fleet-controller may not create it") &&
				strings.Contains(e.Message, "bootstrap.enabled=true") {
				return nil
			}
		}
		return fmt.Errorf("no BootstrapIdentityMissing Warning on cluster local among %d events", len(events.Items))
	})
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "local-cluster"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Secret local-cluster without a bootstrap binding: %v", err)
	}

	// An admin creates the binding (with a subject of their own too).
	admins := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-controller-bootstrap"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Name: "fleet-controller-bootstrap", Namespace: fleet.DefaultSystemNamespace},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "admin@example.com"},
		}}
	if err := c.Create(ctx, admins); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, func() error {
		cluster := &fleet.Cluster{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.LocalClusterName}, cluster); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(cluster.Status.Conditions, fleet.ConditionImported); cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("cluster local not imported: %+v", cond)
		}
		return nil
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(admins), admins); err != nil {
		t.Fatal(err)
	}
	if len(admins.Subjects) != 2 {
		t.Fatalf("the admin's binding was changed: subjects %+v", admins.Subjects)
	}
}
