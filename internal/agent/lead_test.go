package agent

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/testenv"
)

var downstream *testenv.Cluster

func TestMain(m *testing.M) {
	var err error
	downstream, err = testenv.Start(testenv.Options{Name: "agent-lead", WithoutCRDs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = downstream.Stop()
	os.Exit(code)
}

// TestLostLeaseCampaignsAgain: a replica whose lease is taken over stops
// its work and, once the lease is free again, leads again, without lead
// returning (the process does not exit) and without two runs at once.
func TestLostLeaseCampaignsAgain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := downstream.Client
	ns := "lead-" + fmt.Sprint(time.Now().UnixNano()%100000)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	opts := Options{Downstream: downstream.Config, Namespace: ns, LeaderElection: true, Identity: "replica-a",
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 250 * time.Millisecond}
	opts.defaults()

	var starts, stops, running, overlap atomic.Int32
	fn := func(c context.Context, _ Options) error {
		if running.Add(1) > 1 {
			overlap.Store(1)
		}
		starts.Add(1)
		<-c.Done()
		time.Sleep(300 * time.Millisecond) // stopping takes a while
		running.Add(-1)
		stops.Add(1)
		return nil
	}
	returned := make(chan error, 1)
	go func() { returned <- lead(ctx, opts, fn) }()

	eventually(t, func() error {
		if starts.Load() != 1 {
			return fmt.Errorf("starts %d, want 1", starts.Load())
		}
		return nil
	})

	// Another replica takes the lease over (as after an outage of the
	// downstream API server longer than RenewDeadline).
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleet-agent"}, lease); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity = ptr.To("replica-b")
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](3)
	lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
	if err := c.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		if stops.Load() != 1 {
			return fmt.Errorf("stops %d, want 1: the run did not stop when the lease was lost", stops.Load())
		}
		return nil
	})
	select {
	case err := <-returned:
		t.Fatalf("lead returned after losing the lease: %v", err)
	default:
	}
	// replica-b never renews: once its lease lapses, replica-a leads again.
	eventually(t, func() error {
		if starts.Load() != 2 {
			return fmt.Errorf("starts %d, want 2", starts.Load())
		}
		return nil
	})
	if overlap.Load() != 0 {
		t.Fatal("two runs at once")
	}
	cancel()
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("lead: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lead did not return after its context ended")
	}
}

// eventually retries f for up to 30 s (fleettest imports this package).
func eventually(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
