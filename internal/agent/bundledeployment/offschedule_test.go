package bundledeployment_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

func setOffSchedule(t *testing.T, name string, off bool) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		bd := getBD(t, name)
		bd.Spec.OffSchedule = off
		return up.Client.Update(context.Background(), bd)
	}))
}

// An off-schedule BundleDeployment is left as it is downstream (as in
// Fleet): a new deploymentID waits, the release deployed before stays and
// is not watched for drift, until the Schedule's window opens and the new
// version is deployed. Its deletion still uninstalls, window or not.
func TestOffScheduleHoldsDeployment(t *testing.T) {
	cm := func(v string) map[string]string {
		return map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: os\ndata:\n  v: \"" + v + "\"\n"}
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: "offsched-ns"}
	v1 := put(t, bundle{name: "offsched", files: cm("1"), opts: opts})
	waitState(t, "offsched", v1, fleet.Ready)

	setOffSchedule(t, "offsched", true)
	eventually(t, "drift watch dropped", func() error {
		if n := bundledeployment.WatchedObjects(clusterNS, "offsched"); n != 0 {
			return fmt.Errorf("still watching %d objects", n)
		}
		return nil
	})
	v2 := put(t, bundle{name: "offsched", files: cm("2"), opts: opts})
	if !getBD(t, "offsched").Spec.OffSchedule {
		t.Fatal("put cleared spec.offSchedule")
	}
	// The agent sees the new version at once; give it time to (not) act.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		got, err := configMap(t, "offsched-ns", "os")
		must(t, err)
		if got.Data["v"] != "1" {
			t.Fatalf("off-schedule deployment changed downstream: v=%q", got.Data["v"])
		}
		if bd := getBD(t, "offsched"); bd.Status.AppliedDeploymentID != v1 {
			t.Fatalf("off-schedule deployment applied %q", bd.Status.AppliedDeploymentID)
		}
	}

	setOffSchedule(t, "offsched", false) // the window opens
	waitState(t, "offsched", v2, fleet.Ready)
	wantData(t, "offsched-ns", "os", "v", "2")
	if n := bundledeployment.WatchedObjects(clusterNS, "offsched"); n != 1 {
		t.Fatalf("watching %d objects after the window opened, want 1", n)
	}

	setOffSchedule(t, "offsched", true)
	deleteBD(t, "offsched")
	eventually(t, "release uninstalled", func() error {
		_, err := configMap(t, "offsched-ns", "os")
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("configmap still there (err %v)", err)
	})
}
