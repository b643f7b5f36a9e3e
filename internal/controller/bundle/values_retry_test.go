package bundle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// A Bundle waiting for a values Secret that no watch event will announce
// (one written by hand, without an owner reference) is found by the
// retry timer alone. Its delay doubles with the timer's passes only:
// passes of the Bundle's own changes or of BundleDeployment status reports
// come in bursts, and counting them brought the Bundle to the longest
// delay (5 minutes) within seconds. The timer's clock is stopped and moved
// by the test, so which pass is the timer's is decided, not raced.
func TestValuesRetryLengthensOnTimerPassesOnly(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-retry"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "rt", map[string]string{"env": "dev"}, time.Second)
	key := client.ObjectKey{Namespace: ws, Name: "handwritten"}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	bundle.SetValuesClock(key, t0)

	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: key.Name}}
	b.Spec.Resources = resources("kind: ConfigMap\n")
	b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	b.Spec.ValuesHash = apply.HashValues(map[string][]byte{apply.RootValuesKey: []byte(`{"password":"s3cret"}`)})
	must(t, env.Client.Create(ctx, b))

	pass := 0
	// passes makes n passes through changes of the Bundle's labels
	// (the first phase's first pass is the Bundle's creation) and checks
	// that every pass since mark set the retry delay to want.
	passes := func(n int, want time.Duration) {
		t.Helper()
		mark := len(bundle.ValuesRetries(key))
		for i := 0; i < n; i++ {
			if mark+i > 0 {
				pass++
				update(t, ctx, b, false, func() { b.Labels = map[string]string{"pass": fmt.Sprint(pass)} })
			}
			eventually(t, 30*time.Second, func() error {
				if got := len(bundle.ValuesRetries(key)); got < mark+i+1 {
					return fmt.Errorf("%d passes waiting for values, want %d", got, mark+i+1)
				}
				return nil
			})
		}
		for i, d := range bundle.ValuesRetries(key)[mark:] {
			if d != want {
				t.Errorf("pass %d: retry after %s, want %s (all: %v)", mark+i+1, d, want, bundle.ValuesRetries(key))
			}
		}
	}

	// A burst before the timer is due: the delay stays.
	passes(4, 5*time.Second)
	// The timer's pass doubles it, and what follows before the next
	// timer leaves it.
	bundle.SetValuesClock(key, t0.Add(5*time.Second))
	passes(3, 10*time.Second)
	bundle.SetValuesClock(key, t0.Add(15*time.Second))
	passes(2, 20*time.Second)
}
