package helmop

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func TestComputeStatus(t *testing.T) {
	polled := time.Date(2026, 11, 22, 10, 0, 0, 500, time.UTC)
	processed := func(ready, desired int) *fleet.Bundle {
		return &fleet.Bundle{
			ObjectMeta: metav1.ObjectMeta{Generation: 3},
			Status: fleet.BundleStatus{ObservedGeneration: 3,
				Summary: fleet.BundleSummary{Ready: ready, DesiredReady: desired, WaitApplied: desired - ready}},
		}
	}
	stale := processed(1, 1)
	stale.Generation = 4
	// rejected: the Bundle controller refused generation 4 whole (Stalled,
	// observedGeneration left at 3).
	rejected := processed(1, 1)
	rejected.Generation = 4
	rejected.Status.Conditions = []metav1.Condition{
		{Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: "InvalidBundle", Message: "invalid clusterSelector", ObservedGeneration: 4},
		{Type: fleet.ConditionStalled, Status: metav1.ConditionTrue, Reason: "InvalidBundle", Message: "invalid clusterSelector", ObservedGeneration: 4},
	}
	// staleRejection: generation 5 fixes it and is not processed yet.
	staleRejection := rejected.DeepCopy()
	staleRejection.Generation = 5
	tests := []struct {
		name                    string
		prev                    fleet.HelmOpStatus
		o                       outcome
		b                       *fleet.Bundle
		accepted, polled, ready metav1.ConditionStatus
		readyReason, display    string
		version                 string
		observed                int64
		stalled                 metav1.ConditionStatus
		// readyMsg and state, when set, are the Ready message and the
		// display state and message.
		readyMsg, state string
	}{
		{name: "built, all ready, polling", o: outcome{Built: true, Polling: true, Polled: polled, Version: "1.2.0"}, b: processed(2, 2),
			accepted: "True", polled: "True", ready: "True", readyReason: ReasonBundleReady, display: "2/2", version: "1.2.0", observed: 7, stalled: "False"},
		{name: "built, not yet ready", o: outcome{Built: true, Polled: polled, Version: "1.2.0"}, b: processed(1, 2),
			accepted: "True", polled: "False", ready: "False", readyReason: ReasonBundleNotReady, display: "1/2", version: "1.2.0", observed: 7, stalled: "False"},
		{name: "bundle not processed yet", o: outcome{Built: true, Polled: polled, Version: "1.2.0"}, b: stale,
			accepted: "True", polled: "False", ready: "False", readyReason: ReasonWaitingBundle, display: "1/1", version: "1.2.0", observed: 7, stalled: "False"},
		{name: "bundle rejected whole is an error, not waiting", o: outcome{Built: true, Polled: polled, Version: "1.2.0"}, b: rejected,
			accepted: "True", polled: "False", ready: "False", readyReason: "InvalidBundle", display: "1/1", version: "1.2.0", observed: 7, stalled: "True",
			readyMsg: "invalid clusterSelector", state: "Error"},
		{name: "a rejection of an older generation waits", o: outcome{Built: true, Polled: polled, Version: "1.2.0"}, b: staleRejection,
			accepted: "True", polled: "False", ready: "False", readyReason: ReasonWaitingBundle, display: "1/1", version: "1.2.0", observed: 7, stalled: "False"},
		{name: "no bundle yet", o: outcome{Built: true, Version: "1.2.0"}, b: nil,
			accepted: "True", polled: "False", ready: "False", readyReason: ReasonWaitingBundle, display: "0/0", version: "1.2.0", observed: 7, stalled: "False"},
		{name: "download failed after a success keeps the old version and generation",
			prev: fleet.HelmOpStatus{Version: "1.1.0", ObservedGeneration: 6},
			o:    outcome{Err: errors.New("helm repository http://x: connection refused")}, b: processed(2, 2),
			accepted: "True", polled: "False", ready: "False", readyReason: ReasonBuildFailed, display: "2/2", version: "1.1.0", observed: 6, stalled: "False"},
		{name: "bad spec", o: outcome{Err: errors.New("spec.helm.chart is required"), Input: true}, b: nil,
			accepted: "False", polled: "False", ready: "False", readyReason: ReasonInvalidSpec, display: "0/0", version: "", observed: 0, stalled: "True"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.prev
			computeStatus(&st, 7, tc.o, tc.b)
			for typ, want := range map[string]metav1.ConditionStatus{
				fleet.ConditionAccepted: tc.accepted, fleet.ConditionPolled: tc.polled,
				fleet.ConditionReady: tc.ready, fleet.ConditionStalled: tc.stalled,
			} {
				c := findCondition(st.Conditions, typ)
				if c == nil || c.Status != want || c.ObservedGeneration != 7 {
					t.Errorf("%s = %+v, want %s", typ, c, want)
				}
			}
			if c := findCondition(st.Conditions, fleet.ConditionReady); c != nil && c.Reason != tc.readyReason {
				t.Errorf("ready reason %s, want %s", c.Reason, tc.readyReason)
			}
			if st.Display.ReadyBundleDeployments != tc.display || st.Version != tc.version || st.ObservedGeneration != tc.observed {
				t.Errorf("display %q version %q observed %d", st.Display.ReadyBundleDeployments, st.Version, st.ObservedGeneration)
			}
			if tc.readyMsg != "" {
				if c := findCondition(st.Conditions, fleet.ConditionReady); c == nil || c.Message != tc.readyMsg {
					t.Errorf("ready = %+v, want message %q", c, tc.readyMsg)
				}
				if c := findCondition(st.Conditions, fleet.ConditionStalled); tc.stalled == "True" && (c == nil || c.Reason != tc.readyReason || c.Message != tc.readyMsg) {
					t.Errorf("stalled = %+v, want reason %q message %q", c, tc.readyReason, tc.readyMsg)
				}
			}
			if tc.state != "" && (st.Display.State != tc.state || !st.Display.Error || st.Display.Message != tc.readyMsg) {
				t.Errorf("display %+v, want state %q with message %q", st.Display, tc.state, tc.readyMsg)
			}
			if tc.o.Err != nil && (!st.Display.Error || st.Display.Message != tc.o.Err.Error()) {
				t.Errorf("display %+v does not show the error", st.Display)
			}
			if !tc.o.Polled.IsZero() && (st.LastPollingTime == nil || !st.LastPollingTime.Time.Equal(polled.Truncate(time.Second))) {
				t.Errorf("last polling time %v", st.LastPollingTime)
			}
		})
	}
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

func TestPollingInterval(t *testing.T) {
	tests := []struct {
		version, chart string
		interval       time.Duration
		want           time.Duration
	}{
		{version: "^1.0.0", chart: "web", interval: time.Minute, want: time.Minute},
		{version: "", chart: "web", interval: time.Minute, want: time.Minute},
		{version: "*", chart: "web", interval: time.Minute, want: time.Minute},
		{version: "1.2.3", chart: "web", interval: time.Minute, want: 0},
		{version: "v1.2.3", chart: "web", interval: time.Minute, want: time.Minute}, // not strict semver: a tag Helm resolves
		{version: "", chart: "https://example.com/web-1.0.0.tgz", interval: time.Minute, want: 0},
		{version: "^1.0.0", chart: "web", interval: 0, want: 0},
		{version: "^1.0.0", chart: "web", interval: time.Millisecond, want: 10 * time.Second},
	}
	for _, tc := range tests {
		op := &fleet.HelmOp{Spec: fleet.HelmOpSpec{
			BundleSpec:      fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: tc.chart, Version: tc.version}}},
			PollingInterval: &metav1.Duration{Duration: tc.interval},
		}}
		if got := pollingInterval(op, 10*time.Second); got != tc.want {
			t.Errorf("version %q chart %q every %s: %s, want %s", tc.version, tc.chart, tc.interval, got, tc.want)
		}
	}
	if got := pollingInterval(&fleet.HelmOp{}, time.Second); got != 0 {
		t.Errorf("no spec: %s", got)
	}
}

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		version string
		invalid bool
	}{
		{version: ""}, {version: "1.2.3"}, {version: "v1.2.3"}, {version: "1.x"}, {version: "^1.0"}, {version: "*"},
		{version: ">= 1.0, < 2.0"}, {version: "1.2.3-rc.1+build.5"},
		{version: "1.x.y.z", invalid: true}, {version: ">= foo", invalid: true}, {version: "latest", invalid: true},
		{version: "1.2.3.4", invalid: true},
	} {
		err := checkVersion(&fleet.HelmOptions{Chart: "web", Version: tc.version})
		if (err != nil) != tc.invalid {
			t.Errorf("version %q: error %v, want invalid %v", tc.version, err, tc.invalid)
		}
	}
	if err := checkVersion(nil); err != nil {
		t.Errorf("no helm options: %v", err)
	}
}
