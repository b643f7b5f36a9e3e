package controller_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
	"github.com/fleetgo/fleet/internal/gitops/poll"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// The manager cluster shared by every test of this package, with the real
// GitRepo controller (and the targeting Bundle controller, which fills the
// Bundles' status) running in-process.
var (
	env         *testenv.Cluster
	tracker     = poll.NewTracker()
	webhookAddr string
)

const systemNamespace = "cattle-fleet-system"

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	env, err = testenv.Start(testenv.Options{Name: "gitops"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	listening := make(chan string, 1)
	stop, err := fleettest.StartControllers(env.Config, func(ctx context.Context, mgr ctrl.Manager) error {
		if err := bundle.Setup(ctx, mgr, bundle.Options{Workers: 2, Coalesce: 200 * time.Millisecond}); err != nil {
			return err
		}
		_, err := gitops.Setup(ctx, mgr, gitops.Options{
			SystemNamespace:  systemNamespace,
			WebhookAddr:      "127.0.0.1:0",
			WebhookListening: func(a string) { listening <- a },
			Workers:          4,
			GitTimeout:       10 * time.Second,
			Tracker:          tracker,
		})
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	select {
	case webhookAddr = <-listening:
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "webhook server did not start")
		return 1
	}
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

const timeout = 90 * time.Second

func newNamespace(t testing.TB, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func getRepo(t testing.TB, ns, name string) *fleet.GitRepo {
	t.Helper()
	r := &fleet.GitRepo{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func bundlesOf(t testing.TB, ns, repo string) map[string]fleet.Bundle {
	t.Helper()
	var list fleet.BundleList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{fleet.RepoLabel: repo}); err != nil {
		t.Fatal(err)
	}
	out := map[string]fleet.Bundle{}
	for _, b := range list.Items {
		out[b.Name] = b
	}
	return out
}

func condition(r *fleet.GitRepo, typ string) *metav1.Condition {
	return meta.FindStatusCondition(r.Status.Conditions, typ)
}

func secret(t testing.TB, ns, name string, typ corev1.SecretType, data map[string][]byte) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: typ, Data: data}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}
