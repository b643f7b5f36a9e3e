package bundledeployment_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

// While the API server answers the GETs of a deployment's values Secret
// with 429 Too Many Requests, the deployment waits as it does for an
// unreadable Content (Ready False, reason WaitingForContent naming the
// values Secret and the cause, state WaitApplied, no failure counted)
// and the agent reads again every ~15s. Five reads in, a failed deploy
// would wait 64-96s before the next attempt; once the API server answers
// again, this one is deployed, with its values, well within that.
func TestValuesOverloadWaitsAndRecoversQuickly(t *testing.T) {
	t.Parallel()
	const name = "vwait"
	files := map[string]string{
		".chart/aaaaaaaaaaaa/vwait/Chart.yaml": "apiVersion: v2\nname: vwait\nversion: 0.1.0\n",
		".chart/aaaaaaaaaaaa/vwait/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: vwait\n" +
			"data:\n  a: {{ required \"value a is required\" .Values.a | quote }}\n",
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: name + "-ns", Helm: &fleet.HelmOptions{
		Chart: ".chart/aaaaaaaaaaaa/vwait", Values: &fleet.GenericMap{Data: map[string]any{"a": "from-values"}}}}
	bundledeployment.ContentFaults.FailSecret(name, http.StatusTooManyRequests)
	defer bundledeployment.ContentFaults.FailSecret(name, 0)
	id := put(t, bundle{name: name, files: files, opts: opts})
	if bd := getBD(t, name); bd.Spec.ValuesHash == "" {
		t.Fatal("no values Secret: the test reads none")
	}

	waitFor(t, 3*time.Minute, "five reads refused", func() error {
		if n := bundledeployment.ContentFaults.SecretHits(name); n < 5 {
			return fmt.Errorf("%d reads so far", n)
		}
		return nil
	})
	eventually(t, "waiting for the values Secret reported", func() error {
		bd := getBD(t, name)
		c := readyCondition(bd)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != bundledeployment.ReasonWaitingContent {
			return fmt.Errorf("ready condition %+v", c)
		}
		if !strings.Contains(c.Message, "values Secret "+name) || !strings.Contains(c.Message, "429") {
			return fmt.Errorf("message %q names neither the values Secret nor the cause", c.Message)
		}
		if strings.Contains(c.Message, "injected") {
			return fmt.Errorf("message %q carries the API server's answer", c.Message)
		}
		if d := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed); d != nil {
			return fmt.Errorf("deployed condition %+v, want none (nothing failed)", d)
		}
		if s := bundledeployment.State(bd); s != fleet.WaitApplied || bd.Status.Display.State != string(fleet.WaitApplied) {
			return fmt.Errorf("state %s, display %+v", s, bd.Status.Display)
		}
		return nil
	})
	if n := bundledeployment.FailedAttempts(clusterNS, name); n != 0 {
		t.Fatalf("%d failed attempts, want none: an overload is not a failure", n)
	}
	if _, err := configMap(t, name+"-ns", name); err == nil {
		t.Fatal("deployed although its values Secret could not be read")
	}

	bundledeployment.ContentFaults.FailSecret(name, 0)
	waitFor(t, 45*time.Second, "deployed after the overload", func() error {
		bd := getBD(t, name)
		if bd.Status.AppliedDeploymentID != id || bundledeployment.State(bd) != fleet.Ready {
			return fmt.Errorf("applied %q, state %s, conditions %+v", bd.Status.AppliedDeploymentID, bundledeployment.State(bd), bd.Status.Conditions)
		}
		return nil
	})
	wantData(t, name+"-ns", name, "a", "from-values")
}
