package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetgo/fleet/test/scale/harness"
)

func TestMain(m *testing.M) {
	// The harness re-executes this binary as the manager and the agents.
	harness.MaybeChild()
	os.Exit(m.Run())
}

// TestTinyScenario runs the 20-cluster scenario end to end: real API
// servers, the manager, 20 simulated agents registering through the token
// flow and deploying for real, plus one real fleet-agent process. It checks outcomes only (everything Ready,
// every figure measured), never how long anything took.
func TestTinyScenario(t *testing.T) {
	sc, err := harness.Lookup("tiny")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	res, err := harness.Run(ctx, sc, harness.Options{OutDir: t.TempDir(), Idle: 10 * time.Second,
		PhaseTimeout: 5 * time.Minute, ProfileSeconds: 2, RealAgent: true})
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	res.PrintTable(&table)
	t.Log("\n" + table.String())
	if len(res.Problems) > 0 {
		t.Fatalf("problems: %v", res.Problems)
	}
	bds := sc.Clusters * sc.Bundles
	for name, tm := range map[string]harness.Timing{"registration": res.Registration, "create": res.Create, "change": res.Change} {
		if !tm.Complete || tm.Count != tm.Want || tm.TotalSeconds <= 0 {
			t.Errorf("%s: %d of %d done (complete=%v, total %.2fs)", name, tm.Count, tm.Want, tm.Complete, tm.TotalSeconds)
		}
	}
	if res.Registration.Want != sc.Clusters || res.Create.Want != bds || res.Change.Want != sc.Clusters {
		t.Errorf("phases waited for the wrong counts: %+v %+v %+v", res.Registration, res.Create, res.Change)
	}
	if res.BundleDeployments != bds {
		t.Errorf("BundleDeployments = %d, want %d", res.BundleDeployments, bds)
	}
	// Every profile was written: the change's CPU profiles of the
	// manager, the agents and both API servers, and the heap profiles.
	wantProfiles := map[string]bool{"manager-cpu-change.pprof": false, "agents-cpu-change.pprof": false,
		"apiserver-cpu-change.pprof": false, "downstream-apiserver-cpu-change.pprof": false}
	for _, p := range res.Profiles {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s not written: %v", p, err)
		}
		if _, ok := wantProfiles[filepath.Base(p)]; ok {
			wantProfiles[filepath.Base(p)] = true
		}
	}
	for name, seen := range wantProfiles {
		if !seen {
			t.Errorf("no profile %s among %v", name, res.Profiles)
		}
	}
	// A registration writes its Cluster's status twice: the namespace,
	// then the first check-in together with the Ready condition and
	// roll-up it brings about. A third write per cluster means the
	// check-in was written alone (a cache that lagged may cause that for a
	// few clusters, not for most).
	if r := res.RegistrationRequests; r == nil {
		t.Error("the registration's requests were not counted")
	} else {
		statusWrites := 0
		for k, n := range r.ManagerWrites {
			if strings.HasSuffix(k, " clusters/status") {
				statusWrites += n
			}
		}
		if statusWrites < sc.Clusters || 2*statusWrites >= 5*sc.Clusters {
			t.Errorf("the manager wrote Cluster status %d times for %d registrations, want 2 each (writes %v)", statusWrites, sc.Clusters, r.ManagerWrites)
		}
	}
	if res.ChangeRequests == nil || res.ChangeRequests.Agents != sc.Clusters {
		t.Errorf("every simulated cluster must use its own credential during the change: %+v", res.ChangeRequests)
	}
	if res.Floor == nil || res.Floor.RoundTripSeconds <= 0 || res.Floor.DeliveredSeconds <= 0 || res.RatioToFloor <= 0 {
		t.Errorf("raw floor not measured: %+v ratio %v", res.Floor, res.RatioToFloor)
	}
	if res.FloorCR == nil || res.FloorCR.Kind != harness.FloorCustomResource || res.FloorCR.RoundTripSeconds <= 0 || res.RatioToFloorCR <= 0 {
		t.Errorf("custom-resource floor not measured: %+v ratio %v", res.FloorCR, res.RatioToFloorCR)
	}
	if res.Manager.CPUSeconds <= 0 || res.Manager.PeakRSSMiB <= 0 || res.Agents.PeakRSSMiB <= 0 || res.Agents.PerClusterKiB <= 0 ||
		res.Agents.AnonMiB <= 0 || res.Agents.BaseAnonMiB <= 0 {
		t.Errorf("process figures missing: manager %+v agents %+v", res.Manager, res.Agents)
	}
	if res.RealAgent == nil || res.RealAgent.RSSMiB <= 0 {
		t.Errorf("the real fleet-agent's memory was not measured: %+v", res.RealAgent)
	}
	if res.Idle == nil || res.Idle.WindowSeconds <= 0 {
		t.Errorf("idle window not measured: %+v", res.Idle)
	}
	if res.Etcd == nil || res.Etcd.BundleDeployments != bds || res.Etcd.BytesPerBundleDeployment <= 0 || res.Etcd.Contents == 0 {
		t.Errorf("etcd figures: %+v", res.Etcd)
	}
}

// TestScheduleScenario runs the schedule scenario at 20 clusters x 2
// bundles, status-only: a Schedule over every cluster, its window's close
// holding every BundleDeployment, a bundle change made while closed that
// no agent applies, and the next window's opening releasing it. It checks
// outcomes only: every phase complete, each flip written by the manager
// once per BundleDeployment, nothing applied while held.
func TestScheduleScenario(t *testing.T) {
	sc, err := harness.Lookup("schedule-1k")
	if err != nil {
		t.Fatal(err)
	}
	sc.Clusters, sc.Bundles = 20, 2
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := harness.Run(ctx, sc, harness.Options{OutDir: t.TempDir(), PhaseTimeout: 3 * time.Minute, ProfileSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	res.PrintTable(&table)
	t.Log("\n" + table.String())
	if len(res.Problems) > 0 {
		t.Fatalf("problems: %v", res.Problems)
	}
	s := res.Schedule
	if s == nil {
		t.Fatal("no schedule figures")
	}
	bds := sc.Clusters * sc.Bundles
	for name, tm := range map[string]harness.Timing{"hold": s.Hold, "held change": s.HeldChange,
		"release written": s.ReleaseWritten, "release": s.Release} {
		if !tm.Complete || tm.Count != tm.Want || tm.Want == 0 {
			t.Errorf("%s: %d of %d done (complete=%v)", name, tm.Count, tm.Want, tm.Complete)
		}
	}
	if s.Hold.Want != bds || s.HeldChange.Want != sc.Clusters || s.Release.Want != bds {
		t.Errorf("phases waited for the wrong counts: hold %d, held change %d, release %d", s.Hold.Want, s.HeldChange.Want, s.Release.Want)
	}
	if s.AppliedWhileHeld != 0 {
		t.Errorf("%d agents applied the change while the window was closed", s.AppliedWhileHeld)
	}
	// Each flip rewrites every BundleDeployment: at least once, and not
	// many times over (a few conflicts retried at most).
	for name, n := range map[string]int{"hold": s.HoldBundleDeploymentWrites, "release": s.ReleaseBundleDeploymentWrites} {
		if n < bds || n > 2*bds {
			t.Errorf("%s: the manager wrote BundleDeployments %d times for %d of them", name, n, bds)
		}
	}
	if s.HoldRequests == nil || s.ReleaseRequests == nil || s.ReleaseRequests.Agents != sc.Clusters {
		t.Errorf("the flips' requests were not counted: hold %+v release %+v", s.HoldRequests, s.ReleaseRequests)
	}
	if _, ok := res.ManagerCPUByPhase["hold"]; !ok {
		t.Errorf("no manager CPU for the hold: %v", res.ManagerCPUByPhase)
	}
}
