package bundle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// TestClusterGroupStatusDoesNotRetarget: during a rollout the clusterstatus
// controller rewrites a ClusterGroup's status about once a second. That
// must not send every bundle of the namespace through a targeting pass,
// while a change of the group's selector or labels still re-targets them.
//
// A pass is observed through the bundle's finalizer: every reconcile adds
// it when it is missing, and removing it is no event the Bundle watch
// passes on (neither generation nor labels change).
func TestClusterGroupStatusDoesNotRetarget(t *testing.T) {
	ctx := context.Background()
	ws := "ws-cg-status"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "prod", map[string]string{"env": "prod"}, time.Second)
	newCluster(t, ctx, ws, "dev", map[string]string{"env": "dev"}, time.Second)
	g := &fleet.ClusterGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "g"},
		Spec:       fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
	}
	must(t, env.Client.Create(ctx, g))
	app := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}}
	app.Spec.Resources = resources("kind: ConfigMap\n")
	app.Spec.Targets = []fleet.BundleTarget{{ClusterGroup: "g"}}
	must(t, env.Client.Create(ctx, app))
	gold := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "gold"}}
	gold.Spec.Resources = resources("kind: Secret\n")
	gold.Spec.Targets = []fleet.BundleTarget{{ClusterGroupSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}}
	must(t, env.Client.Create(ctx, gold))

	deploysTo := func(name string, want ...string) func() error {
		return func() error {
			bds, err := bundleDeployments(ctx, ws, name)
			if err != nil {
				return err
			}
			if got := sortedKeys(bds); fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("bundle %s deploys to %v, want %v", name, got, want)
			}
			return nil
		}
	}
	eventually(t, 60*time.Second, deploysTo("app", "prod"))

	reconciled := func() (bool, error) {
		b := &fleet.Bundle{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(app), b); err != nil {
			return false, err
		}
		return controllerutil.ContainsFinalizer(b, bundle.Finalizer), nil
	}
	notReconciledFor := func(d time.Duration) bool {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if again, err := reconciled(); err != nil || again {
				return false
			}
		}
		return true
	}
	// Let the passes of the bundle's creation (deployment events, delayed
	// status writes) finish: then a removed finalizer stays removed.
	settled := false
	for i := 0; i < 10 && !settled; i++ {
		update(t, ctx, app, false, func() { controllerutil.RemoveFinalizer(app, bundle.Finalizer) })
		settled = notReconciledFor(7 * time.Second)
	}
	if !settled {
		t.Fatal("the bundle kept being reconciled without any change")
	}

	for i := 0; i < 5; i++ {
		update(t, ctx, g, true, func() { g.Status.Display.State = fmt.Sprintf("status write %d", i) })
		time.Sleep(200 * time.Millisecond)
	}
	consistently(t, 5*time.Second, func() error {
		again, err := reconciled()
		if err != nil {
			return err
		}
		if again {
			return fmt.Errorf("a ClusterGroup status write made the bundle go through a targeting pass")
		}
		return nil
	})

	update(t, ctx, g, false, func() {
		g.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "dev"}},
		}}
	})
	eventually(t, 60*time.Second, deploysTo("app", "dev", "prod"))

	must(t, deploysTo("gold")())
	update(t, ctx, g, false, func() { g.Labels = map[string]string{"tier": "gold"} })
	eventually(t, 60*time.Second, deploysTo("gold", "dev", "prod"))
}
