package simulator

import (
	"context"
	"testing"
)

// TestOffScheduleNotApplied: like the real agent, a simulated agent leaves
// an off-schedule BundleDeployment alone (no apply, no status write) and
// applies it once its Schedule's window opens.
func TestOffScheduleNotApplied(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, requests := testAgent(t, ctx)
	bd := bundleDeployment("bd", "s-new:1")
	bd.Spec.OffSchedule = true

	a.handle(ctx, &bd)
	if n := requests.Load(); n != 0 {
		t.Fatalf("an off-schedule deployment was applied (%d requests to the API server)", n)
	}

	bd.Spec.OffSchedule = false
	a.handle(ctx, &bd)
	if requests.Load() == 0 {
		t.Fatal("the deployment was not applied once its window opened")
	}
}
