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
	"github.com/fleetgo/fleet/internal/manifest"
)

// contentWaitBundle is a bundle of one ConfigMap and the name of its
// Content, known before the bundle is put, so that reads of it can fail
// from the start.
func contentWaitBundle(t *testing.T, name string) (bundle, string) {
	t.Helper()
	file := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  a: \"1\"\n"
	m, err := manifest.New([]fleet.BundleResource{{Name: "cm.yaml", Content: file}})
	must(t, err)
	id, err := m.ID()
	must(t, err)
	return bundle{name: name, files: map[string]string{"cm.yaml": file},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: name + "-ns"}}, id
}

// waitFor polls f for up to timeout (eventually's 90s is too short or too
// long for the phases below).
func waitFor(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s (within %s): %v", what, timeout, err)
}

func readyCondition(bd *fleet.BundleDeployment) *metav1.Condition {
	return meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionReady)
}

// While the API server answers the reads of a deployment's Content with
// 429 Too Many Requests, the deployment waits (Ready False, reason
// WaitingForContent naming the Content and the cause, state WaitApplied)
// instead of failing, and the agent reads again every ~15s. Five reads in,
// a failed deploy would wait 64-96s before the next attempt (5s doubling);
// once the API server answers again, this one is deployed well within
// that.
func TestContentOverloadWaitsAndRecoversQuickly(t *testing.T) {
	t.Parallel()
	b, content := contentWaitBundle(t, "cwait")
	bundledeployment.ContentFaults.Fail(content, http.StatusTooManyRequests)
	defer bundledeployment.ContentFaults.Fail(content, 0)
	id := put(t, b)
	if got := manifest.ManifestIDOf(id); got != content {
		t.Fatalf("content %s, want %s", got, content)
	}

	waitFor(t, 3*time.Minute, "five reads refused", func() error {
		if n := bundledeployment.ContentFaults.Hits(content); n < 5 {
			return fmt.Errorf("%d reads so far", n)
		}
		return nil
	})
	eventually(t, "waiting for the content reported", func() error {
		bd := getBD(t, "cwait")
		c := readyCondition(bd)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != bundledeployment.ReasonWaitingContent {
			return fmt.Errorf("ready condition %+v", c)
		}
		if !strings.Contains(c.Message, content) || !strings.Contains(c.Message, "429") {
			return fmt.Errorf("message %q names neither the content nor the cause", c.Message)
		}
		if d := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed); d != nil {
			return fmt.Errorf("deployed condition %+v, want none (nothing failed)", d)
		}
		if s := bundledeployment.State(bd); s != fleet.WaitApplied || bd.Status.Display.State != string(fleet.WaitApplied) {
			return fmt.Errorf("state %s, display %+v", s, bd.Status.Display)
		}
		return nil
	})
	if _, err := configMap(t, "cwait-ns", "cwait"); err == nil {
		t.Fatal("deployed although its content could not be read")
	}

	bundledeployment.ContentFaults.Fail(content, 0)
	waitFor(t, 45*time.Second, "deployed after the overload", func() error {
		bd := getBD(t, "cwait")
		if bd.Status.AppliedDeploymentID != id || bundledeployment.State(bd) != fleet.Ready {
			return fmt.Errorf("applied %q, state %s, conditions %+v", bd.Status.AppliedDeploymentID, bundledeployment.State(bd), bd.Status.Conditions)
		}
		return nil
	})
	wantData(t, "cwait-ns", "cwait", "a", "1")
}

// A deployment whose Content is really missing (404 after the quick
// retries) is a DeployError with the growing backoff, as before. An
// overload meanwhile neither resets nor grows that backoff: the deployment
// waits for the content instead, and when the Content is still missing
// after it, the backoff goes on from where it was.
func TestContentOverloadKeepsBackoffOfMissingContent(t *testing.T) {
	t.Parallel()
	b, content := contentWaitBundle(t, "cmissing")
	bundledeployment.ContentFaults.Fail(content, http.StatusNotFound)
	defer bundledeployment.ContentFaults.Fail(content, 0)
	id := put(t, b)
	if got := manifest.ManifestIDOf(id); got != content {
		t.Fatalf("content %s, want %s", got, content)
	}
	deployError := func() error {
		bd := getBD(t, "cmissing")
		d := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
		if d == nil || d.Status != metav1.ConditionFalse || d.Reason != bundledeployment.ReasonDeployError || !strings.Contains(d.Message, content) {
			return fmt.Errorf("deployed condition %+v", d)
		}
		if s := bundledeployment.State(bd); s != fleet.ErrApplied {
			return fmt.Errorf("state %s", s)
		}
		return nil
	}
	eventually(t, "missing content is a deploy error", deployError)
	eventually(t, "two failed attempts", func() error {
		if n := bundledeployment.FailedAttempts(clusterNS, "cmissing"); n < 2 {
			return fmt.Errorf("%d failed attempts", n)
		}
		return nil
	})

	bundledeployment.ContentFaults.Fail(content, http.StatusServiceUnavailable)
	hits := bundledeployment.ContentFaults.Hits(content)
	failed := bundledeployment.FailedAttempts(clusterNS, "cmissing")
	waitFor(t, 2*time.Minute, "two reads refused with 503", func() error {
		if n := bundledeployment.ContentFaults.Hits(content) - hits; n < 2 {
			return fmt.Errorf("%d reads so far", n)
		}
		return nil
	})
	eventually(t, "waiting for the content reported", func() error {
		c := readyCondition(getBD(t, "cmissing"))
		if c == nil || c.Reason != bundledeployment.ReasonWaitingContent || !strings.Contains(c.Message, "503") {
			return fmt.Errorf("ready condition %+v", c)
		}
		return nil
	})
	if n := bundledeployment.FailedAttempts(clusterNS, "cmissing"); n != failed {
		t.Fatalf("%d failed attempts after the overload, want the %d from before it", n, failed)
	}

	bundledeployment.ContentFaults.Fail(content, http.StatusNotFound)
	eventually(t, "missing again: a deploy error", func() error {
		if err := deployError(); err != nil {
			return err
		}
		if c := readyCondition(getBD(t, "cmissing")); c == nil || c.Reason != bundledeployment.ReasonDeployError {
			return fmt.Errorf("ready condition %+v", c)
		}
		return nil
	})
	if n := bundledeployment.FailedAttempts(clusterNS, "cmissing"); n != failed+1 {
		t.Fatalf("%d failed attempts, want %d: the backoff goes on from before the overload", n, failed+1)
	}
}
