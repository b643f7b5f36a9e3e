package bundledeployment_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/testenv"
)

// Deploying a bundle costs the manager very few writes: the agent patches
// the status only when it changed, however many downstream events follow.
func TestFewStatusWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	wc, err := client.NewWithWatch(up.Config, client.Options{Scheme: testenv.Scheme})
	must(t, err)
	watchIt := func() watch.Interface {
		w, err := wc.Watch(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(clusterNS),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", "writes")})
		must(t, err)
		return w
	}
	w := watchIt()
	defer func() { w.Stop() }()

	files := map[string]string{"all.yaml": driftFiles + "---\n" + "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: w2\n"}
	id := put(t, bundle{name: "writes", files: files, opts: fleet.BundleDeploymentOptions{DefaultNamespace: "writes-ns"}})
	modified, ready := 0, false
	var quiet <-chan time.Time
	for {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				// Closed by the API server: watch again (the writes in
				// between go uncounted, which only makes the bound looser).
				w = watchIt()
				continue
			}
			if ev.Type != watch.Modified {
				continue
			}
			modified++
			bd := ev.Object.(*fleet.BundleDeployment)
			if bd.Status.AppliedDeploymentID == id && bundledeployment.State(bd) == fleet.Ready && !ready {
				ready = true
				quiet = time.After(5 * time.Second) // then count what follows
			}
		case <-quiet:
			t.Logf("status writes for one deployment of 3 objects: %d", modified)
			if modified > 2 {
				t.Fatalf("%d writes to the BundleDeployment, want at most 2", modified)
			}
			return
		case <-ctx.Done():
			t.Fatalf("never ready (%d writes)", modified)
		}
	}
}
