package manager

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi/serve"
	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// startManager runs a whole manager on the test cluster until the test
// ends.
func startManager(t *testing.T, opts Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := New(ctx, up.Config, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// sshHelmOp creates, in a new namespace, a helm Secret holding only key
// and a HelmOp deploying chart with it; it returns the namespace.
func sshHelmOp(t *testing.T, chart string, key []byte) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "helmop-ssh-"}}
	if err := up.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "key-only"},
		Data: map[string][]byte{"ssh-privatekey": key}}
	if err := up.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "app"},
		Spec: fleet.HelmOpSpec{
			BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: "app",
				Helm:             &fleet.HelmOptions{Chart: chart},
			}},
			HelmSecretName: "key-only",
		},
	}
	if err := up.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// builtChart fails until the HelmOp "app" of ns is Accepted and its Bundle
// holds chart version 1.0.0.
func builtChart(ns string) error {
	ctx := context.Background()
	op := &fleet.HelmOp{}
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, op); err != nil {
		return err
	}
	if c := meta.FindStatusCondition(op.Status.Conditions, fleet.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("accepted = %+v, ready = %+v", c, meta.FindStatusCondition(op.Status.Conditions, fleet.ConditionReady))
	}
	var list fleet.BundleList
	if err := up.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{fleet.HelmOpLabel: "app"}); err != nil {
		return err
	}
	if len(list.Items) != 1 || list.Items[0].Spec.Helm == nil || list.Items[0].Spec.Helm.Version != "1.0.0" {
		return fmt.Errorf("%d bundles, want one of chart version 1.0.0; ready = %+v",
			len(list.Items), meta.FindStatusCondition(op.Status.Conditions, fleet.ConditionReady))
	}
	return nil
}

// TestHelmOpSSHHostKeyPolicy: fleet-controller's HelmOps verify a git::
// chart's SSH server as its GitRepos do: against the known-hosts ConfigMap
// of its namespace when the helm Secret has no known_hosts, and not at all
// with insecureSkipHostKeyChecks, also when GitOps is disabled.
func TestHelmOpSSHHostKeyPolicy(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "charts")
	repo.Commit("master", map[string]string{
		"app/Chart.yaml":        "apiVersion: v2\nname: app\nversion: 1.0.0\n",
		"app/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n",
	})
	srv := gittest.NewSSHServer(t, root)
	chart := "git::" + srv.URLFor(repo) + "//app"
	quiet := Options{MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0", ContentAPI: serve.Options{Addr: "0"}}

	t.Run("known-hosts ConfigMap", func(t *testing.T) {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: fleet.DefaultSystemNamespace, Name: git.KnownHostsConfigMap},
			Data:       map[string]string{git.KeyKnownHosts: string(srv.KnownHosts)},
		}
		if err := up.Client.Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = up.Client.Delete(context.Background(), cm) })
		startManager(t, quiet)
		ns := sshHelmOp(t, chart, srv.ClientKeyPEM)
		eventually(t, 2*time.Minute, func() error { return builtChart(ns) })
	})

	t.Run("insecureSkipHostKeyChecks without GitOps", func(t *testing.T) {
		t.Cleanup(func() { git.SetInsecureSkipHostKeyChecks(false) })
		opts := quiet
		opts.DisableGitOps, opts.InsecureSkipHostKeyChecks = true, true
		startManager(t, opts)
		ns := sshHelmOp(t, chart, srv.ClientKeyPEM)
		eventually(t, 2*time.Minute, func() error { return builtChart(ns) })
	})
}
