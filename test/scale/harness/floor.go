package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetgo/fleet/internal/kubeclient"
)

// Floor is what the API server itself needs for the round trip a rollout
// makes, with no project code: one writer creates N objects (one per
// namespace, 50 at a time, like a controller with 50 workers), N watchers
// (one per namespace, like N agents) each see theirs and answer with one
// write, and one observer watching everything sees every answer.
//
// It runs twice: with ConfigMaps (the API server's cheapest path: a
// built-in type, protobuf) and with a custom resource of a
// BundleDeployment's size (the path any CRD-based system pays: JSON,
// schema validation and pruning, managedFields of unstructured objects).
// The ratio of a rollout is given to both.
type Floor struct {
	// Kind is "ConfigMap" or "CustomResource".
	Kind string `json:"kind"`
	// N is the number of watchers (one namespace each), PerWatcher the
	// objects each of them receives and answers: 1 for a rollout of one
	// bundle, the number of bundles for a creation of all of them.
	N          int `json:"n"`
	PerWatcher int `json:"perWatcher"`
	// ObjectBytes is the size of each object's payload.
	ObjectBytes int `json:"objectBytes"`
	// DeliveredSeconds: from the first write until every watcher saw its
	// objects. RoundTripSeconds: until the observer saw every answer.
	DeliveredSeconds float64 `json:"deliveredSeconds"`
	RoundTripSeconds float64 `json:"roundTripSeconds"`
	// Rounds are the round trips of each measurement when the floor was
	// measured more than once; the two figures above are then medians.
	Rounds []float64 `json:"rounds,omitempty"`
}

// measureFloors measures both floors of a scenario, rounds times each,
// into res.Floor and res.FloorCR; what fails is recorded as a problem. The
// floor is of what is timed: a change rolls out one object per cluster, a
// creation one per cluster and bundle.
func measureFloors(ctx context.Context, cfg *rest.Config, sc Scenario, rounds int, res *Result, logf func(string, ...any)) {
	perWatcher := 1
	if !sc.Change && sc.Bundles > 1 {
		perWatcher = sc.Bundles
	}
	logf("measuring the raw floor (%d watchers, %d objects each)", sc.Clusters, perWatcher)
	f, err := medianFloor(rounds, func() (Floor, error) {
		return measureFloor(ctx, cfg, FloorConfigMap, sc.Clusters, perWatcher, 1024)
	})
	if err != nil {
		res.problem("raw floor: %v", err)
	} else {
		res.Floor = &f
	}
	// A custom resource about the size of a stored BundleDeployment.
	// A small unmeasured round first: the API server starts serving (and
	// watch-caching) a new CRD lazily.
	_, _ = measureFloor(ctx, cfg, FloorCustomResource, min(sc.Clusters, 10), 1, 3*1024)
	fcr, err := medianFloor(rounds, func() (Floor, error) {
		return measureFloor(ctx, cfg, FloorCustomResource, sc.Clusters, perWatcher, 3*1024)
	})
	if err != nil {
		res.problem("raw floor (custom resource): %v", err)
	} else {
		res.FloorCR = &fcr
	}
}

// medianFloor measures the floor rounds times and keeps the median
// delivery and round trip.
func medianFloor(rounds int, measure func() (Floor, error)) (Floor, error) {
	var all []Floor
	for range rounds {
		f, err := measure()
		if err != nil {
			return f, err
		}
		all = append(all, f)
	}
	out := all[0]
	if rounds == 1 {
		return out, nil
	}
	med := func(get func(Floor) float64) float64 {
		v := make([]float64, len(all))
		for i, f := range all {
			v[i] = get(f)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	out.DeliveredSeconds = med(func(f Floor) float64 { return f.DeliveredSeconds })
	out.RoundTripSeconds = med(func(f Floor) float64 { return f.RoundTripSeconds })
	for _, f := range all {
		out.Rounds = append(out.Rounds, f.RoundTripSeconds)
	}
	return out, nil
}

const floorLabel = "fleet-scale-floor"

// Kinds of the floor.
const (
	FloorConfigMap      = "ConfigMap"
	FloorCustomResource = "CustomResource"
)

var (
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	floorCRGVR    = schema.GroupVersionResource{Group: "scale.fleet.test", Version: "v1", Resource: "floorobjects"}
)

// FloorObject builds the object written for namespace ns: the payload as a
// ConfigMap's data, or as a custom resource's spec.
func FloorObject(kind, ns, label string, payload int) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetName("floor")
	u.SetNamespace(ns)
	u.SetLabels(map[string]string{floorLabel: label})
	data := map[string]any{"payload": strings.Repeat("x", payload)}
	if kind == FloorCustomResource {
		u.SetAPIVersion(floorCRGVR.GroupVersion().String())
		u.SetKind("FloorObject")
		u.Object["spec"] = data
	} else {
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.Object["data"] = data
	}
	return u
}

// EnsureFloorCRD installs the floor's CRD (namespaced, a structural schema
// with one string field, like a small CRD) and waits until it is served.
func EnsureFloorCRD(ctx context.Context, cfg *rest.Config) error {
	cs, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crd := &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: floorCRGVR.Resource + "." + floorCRGVR.Group},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: floorCRGVR.Group,
			Names: apiextv1.CustomResourceDefinitionNames{Plural: floorCRGVR.Resource, Kind: "FloorObject", ListKind: "FloorObjectList"},
			Scope: apiextv1.NamespaceScoped,
			Versions: []apiextv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &apiextv1.JSONSchemaProps{Type: "object",
					Properties: map[string]apiextv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{"payload": {Type: "string"}}},
					}}}}},
		},
	}
	if _, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := dc.Resource(floorCRGVR).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("floor CRD not served: %w", err)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// measureFloor runs the floor round trip for n namespaces with perWatcher
// objects each, of the given kind.
func measureFloor(ctx context.Context, admin *rest.Config, kind string, n, perWatcher, payload int) (Floor, error) {
	perWatcher = max(perWatcher, 1)
	total := int64(n * perWatcher)
	cfg := rest.CopyConfig(admin)
	cfg.QPS = -1
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Floor{}, err
	}
	gvr := configMapsGVR
	if kind == FloorCustomResource {
		gvr = floorCRGVR
		if err := EnsureFloorCRD(ctx, cfg); err != nil {
			return Floor{}, err
		}
	}
	resOf := func(c dynamic.Interface, ns string) dynamic.ResourceInterface {
		if ns == "" {
			return c.Resource(gvr)
		}
		return c.Resource(gvr).Namespace(ns)
	}
	res := func(ns string) dynamic.ResourceInterface { return resOf(dc, ns) }
	// The observer and every watcher get a connection of their own, as the
	// manager's informers and each agent have: on the writer's connection
	// their streams queue behind its writes and the API server closes them
	// as unresponsive (kubeclient.OwnConnection).
	ownRes := func(ns string) (dynamic.ResourceInterface, error) {
		c, err := dynamic.NewForConfig(kubeclient.OwnConnection(cfg))
		if err != nil {
			return nil, err
		}
		return resOf(c, ns), nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Floor{}, err
	}
	f := Floor{Kind: kind, N: n, PerWatcher: perWatcher, ObjectBytes: payload}
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
	observer, err := ownRes("")
	if err != nil {
		return f, err
	}
	obsRV, err := listRV(ctx, observer, sel)
	if err != nil {
		return f, err
	}
	go resumeWatch(ctx, observer, sel, obsRV, func(ev watch.Event) bool {
		o, ok := ev.Object.(*unstructured.Unstructured)
		if ok && ev.Type == watch.Modified && o.GetAnnotations()["ack"] == round {
			if acked.Add(1) == total {
				allAcked <- time.Now()
				return true
			}
		}
		return false
	})
	var delivered atomic.Int64
	allDelivered := make(chan time.Time, 1)
	rvs := make([]string, n)
	watchers := make([]dynamic.ResourceInterface, n)
	if err := parallel(ctx, n, 50, func(i int) error {
		w, err := ownRes(ns(i))
		if err != nil {
			return err
		}
		watchers[i] = w
		rvs[i], err = listRV(ctx, w, sel)
		return err
	}); err != nil {
		return f, fmt.Errorf("floor watchers: %w", err)
	}
	var errs sync.Map
	var established sync.WaitGroup
	for i := range n {
		established.Add(1)
		go func() {
			first, seen := true, 0
			resumeWatch(ctx, watchers[i], sel, rvs[i], func(ev watch.Event) bool {
				if first {
					first = false
					established.Done()
				}
				o, ok := ev.Object.(*unstructured.Unstructured)
				if !ok || ev.Type != watch.Added {
					return false
				}
				if delivered.Add(1) == total {
					allDelivered <- time.Now()
				}
				patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"ack":%q}}}`, round))
				if _, err := watchers[i].Patch(ctx, o.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					errs.Store(i, err)
				}
				seen++
				return seen == perWatcher
			}, func() {
				if first {
					first = false
					established.Done()
				}
			})
		}()
	}
	established.Wait()
	// Leftovers of an earlier round go first, outside the measured time.
	if err := parallel(ctx, n, 50, func(i int) error {
		return res(ns(i)).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: floorLabel})
	}); err != nil {
		return f, fmt.Errorf("floor clean-up: %w", err)
	}
	label := strings.ReplaceAll(round, ".", "-")
	start := time.Now()
	// Object j of every namespace, then j+1: the order in which the manager
	// writes the deployments of many bundles.
	if err := parallel(ctx, int(total), 50, func(i int) error {
		o := FloorObject(kind, ns(i%n), label, payload)
		if j := i / n; j > 0 {
			o.SetName(fmt.Sprintf("floor-%d", j))
		}
		_, err := res(ns(i%n)).Create(ctx, o, metav1.CreateOptions{})
		return err
	}); err != nil {
		return f, fmt.Errorf("floor writes: %w", err)
	}
	select {
	case t := <-allDelivered:
		f.DeliveredSeconds = t.Sub(start).Seconds()
	case <-ctx.Done():
		return f, fmt.Errorf("floor: watchers saw only %d of %d objects", delivered.Load(), total)
	}
	select {
	case t := <-allAcked:
		f.RoundTripSeconds = t.Sub(start).Seconds()
	case <-ctx.Done():
		var first error
		errs.Range(func(_, v any) bool { first = v.(error); return false })
		return f, fmt.Errorf("floor: only %d of %d answers seen (first error: %v)", acked.Load(), total, first)
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
// It is how each watcher's connection is set up, before anything is
// timed, so a failure is tried again a few times: with 10,000 watchers on
// a loaded API server a TLS handshake can time out.
func listRV(ctx context.Context, r dynamic.ResourceInterface, sel metav1.ListOptions) (string, error) {
	sel.Limit = 1
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(time.Duration(attempt) * time.Second):
			}
		}
		var l *unstructured.UnstructuredList
		if l, err = r.List(ctx, sel); err == nil {
			return l.GetResourceVersion(), nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return "", err
}

// resumeWatch watches from rv, calling handle for each event until it
// returns true or ctx ends; a closed watch is resumed where it stopped.
// onStart (optional) is called once the first watch is established.
func resumeWatch(ctx context.Context, r dynamic.ResourceInterface, sel metav1.ListOptions, rv string,
	handle func(watch.Event) bool, onStart ...func()) {
	for ctx.Err() == nil {
		opts := sel
		opts.ResourceVersion, opts.AllowWatchBookmarks = rv, true
		w, err := r.Watch(ctx, opts)
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
