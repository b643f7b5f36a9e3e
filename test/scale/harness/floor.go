package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Floor is what the API server itself needs for the round trip a rollout
// makes, with no project code: one writer creates N objects (one per
// namespace, 50 at a time, like a controller with 50 workers), N watchers
// (one per namespace, like N agents) each see theirs and answer with one
// write, and one observer watching everything sees every answer.
type Floor struct {
	N int `json:"n"`
	// ObjectBytes is the size of each object's payload.
	ObjectBytes int `json:"objectBytes"`
	// DeliveredSeconds: from the first write until every watcher saw its
	// object. RoundTripSeconds: until the observer saw every answer.
	DeliveredSeconds float64 `json:"deliveredSeconds"`
	RoundTripSeconds float64 `json:"roundTripSeconds"`
}

const floorLabel = "fleet-scale-floor"

// measureFloor runs the floor round trip for n namespaces.
func measureFloor(ctx context.Context, admin *rest.Config, n, payload int) (Floor, error) {
	cfg := rest.CopyConfig(admin)
	cfg.QPS = -1
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Floor{}, err
	}
	f := Floor{N: n, ObjectBytes: payload}
	ns := func(i int) string { return fmt.Sprintf("floor-%05d", i) }
	if err := parallel(ctx, n, 50, func(i int) error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns(i)}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		return f, fmt.Errorf("floor namespaces: %w", err)
	}
	round := time.Now().Format("150405.000000")
	sel := metav1.ListOptions{LabelSelector: floorLabel + "=" + strings.ReplaceAll(round, ".", "-")}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	// The observer, then the watchers, all established before the first
	// write. A watch the server closes is resumed from the last
	// resourceVersion seen, so no event is lost.
	var acked atomic.Int64
	allAcked := make(chan time.Time, 1)
	obsRV, err := listRV(ctx, cs, "", sel)
	if err != nil {
		return f, err
	}
	go resumeWatch(ctx, cs, "", sel, obsRV, func(ev watch.Event) bool {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if ok && ev.Type == watch.Modified && cm.Annotations["ack"] == round {
			if acked.Add(1) == int64(n) {
				allAcked <- time.Now()
				return true
			}
		}
		return false
	})
	var delivered atomic.Int64
	allDelivered := make(chan time.Time, 1)
	rvs := make([]string, n)
	if err := parallel(ctx, n, 50, func(i int) error {
		rv, err := listRV(ctx, cs, ns(i), sel)
		rvs[i] = rv
		return err
	}); err != nil {
		return f, fmt.Errorf("floor watchers: %w", err)
	}
	var errs sync.Map
	var established sync.WaitGroup
	for i := range n {
		established.Add(1)
		go func() {
			first := true
			resumeWatch(ctx, cs, ns(i), sel, rvs[i], func(ev watch.Event) bool {
				if first {
					first = false
					established.Done()
				}
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok || ev.Type != watch.Added {
					return false
				}
				if delivered.Add(1) == int64(n) {
					allDelivered <- time.Now()
				}
				patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"ack":%q}}}`, round))
				if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					errs.Store(i, err)
				}
				return true
			}, func() {
				if first {
					first = false
					established.Done()
				}
			})
		}()
	}
	established.Wait()
	data := map[string]string{"payload": strings.Repeat("x", payload)}
	start := time.Now()
	if err := parallel(ctx, n, 50, func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "floor", Namespace: ns(i),
			Labels: map[string]string{floorLabel: strings.ReplaceAll(round, ".", "-")}}, Data: data}
		_ = cs.CoreV1().ConfigMaps(ns(i)).Delete(ctx, "floor", metav1.DeleteOptions{})
		_, err := cs.CoreV1().ConfigMaps(ns(i)).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}); err != nil {
		return f, fmt.Errorf("floor writes: %w", err)
	}
	select {
	case t := <-allDelivered:
		f.DeliveredSeconds = t.Sub(start).Seconds()
	case <-ctx.Done():
		return f, fmt.Errorf("floor: only %d of %d watchers saw their object", delivered.Load(), n)
	}
	select {
	case t := <-allAcked:
		f.RoundTripSeconds = t.Sub(start).Seconds()
	case <-ctx.Done():
		var first error
		errs.Range(func(_, v any) bool { first = v.(error); return false })
		return f, fmt.Errorf("floor: only %d of %d answers seen (first error: %v)", acked.Load(), n, first)
	}
	return f, nil
}

// parallel runs fn(0..n-1) with at most width at a time; the first error
// wins.
func parallel(ctx context.Context, n, width int, fn func(i int) error) error {
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for i := range n {
		if ctx.Err() != nil || first.Load() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				first.CompareAndSwap(nil, &err)
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return ctx.Err()
}

// listRV returns the current resourceVersion of a list, to watch from.
func listRV(ctx context.Context, cs kubernetes.Interface, ns string, sel metav1.ListOptions) (string, error) {
	sel.Limit = 1
	l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, sel)
	if err != nil {
		return "", err
	}
	return l.ResourceVersion, nil
}

// resumeWatch watches from rv, calling handle for each event until it
// returns true or ctx ends; a closed watch is resumed where it stopped.
// onStart (optional) is called once the first watch is established.
func resumeWatch(ctx context.Context, cs kubernetes.Interface, ns string, sel metav1.ListOptions, rv string,
	handle func(watch.Event) bool, onStart ...func()) {
	for ctx.Err() == nil {
		opts := sel
		opts.ResourceVersion, opts.AllowWatchBookmarks = rv, true
		w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, opts)
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		for _, f := range onStart {
			f()
		}
		onStart = nil
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				break
			}
			if m, ok := ev.Object.(metav1.Object); ok {
				rv = m.GetResourceVersion()
			}
			if ev.Type != watch.Bookmark && handle(ev) {
				w.Stop()
				return
			}
		}
		w.Stop()
	}
}
