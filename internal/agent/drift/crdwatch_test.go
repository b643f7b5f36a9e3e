package drift

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fleetgo/fleet/internal/agent/deployer"
)

// recoverTimeout bounds how long the watcher may take to follow a custom
// resource once its CRD is served: well below the 30-60 s a client-go
// reflector backs off to while a resource is not served, and generous for
// two busy cores (establishing a CRD and a refreshed discovery take a few
// seconds there).
const recoverTimeout = 25 * time.Second

var (
	crdGVR   = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	crdWatNS = "drift-crd"
)

// crdEnv is a Watcher on the package's API server with the agent's shared
// discovery-backed mapper, and what it told about which BundleDeployment.
type crdEnv struct {
	t     *testing.T
	ctx   context.Context
	dyn   dynamic.Interface
	w     *Watcher
	mu    sync.Mutex
	notes map[types.NamespacedName]int
}

func newCRDEnv(t *testing.T) *crdEnv {
	t.Helper()
	c := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := deployer.NewDiscovery(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	e := &crdEnv{t: t, ctx: ctx, dyn: dyn, notes: map[types.NamespacedName]int{}}
	e.w, err = NewWatcher(ctx, WatcherOptions{Config: c.Config, Label: "drift-test", Mapper: disc.RESTMapper(),
		Notify: func(bd types.NamespacedName) {
			e.mu.Lock()
			e.notes[bd]++
			e.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": crdWatNS}}}
	_, err = dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return e
}

func (e *crdEnv) notified(bd types.NamespacedName) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.notes[bd]
}

// createCRD creates the Widget CRD of group and waits until it is
// established.
func (e *crdEnv) createCRD(group string) {
	e.t.Helper()
	crd := obj(e.t, fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, group))
	if _, err := e.dyn.Resource(crdGVR).Create(e.ctx, crd, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	// Gone after the test (and its Widgets with it), so that it can run
	// again on the same API server (-count).
	e.t.Cleanup(func() {
		_ = e.dyn.Resource(crdGVR).Delete(context.Background(), crd.GetName(), metav1.DeleteOptions{})
		deadline := time.Now().Add(recoverTimeout)
		for time.Now().Before(deadline) {
			if _, err := e.dyn.Resource(crdGVR).Get(context.Background(), crd.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	eventually(e.t, "CRD established", func() error {
		live, err := e.dyn.Resource(crdGVR).Get(e.ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("not established")
	})
}

// deleteCRD deletes the Widget CRD of group (and with it its Widgets) and
// waits until it is gone.
func (e *crdEnv) deleteCRD(group string) {
	e.t.Helper()
	name := "widgets." + group
	if err := e.dyn.Resource(crdGVR).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	eventually(e.t, "CRD deleted", func() error {
		_, err := e.dyn.Resource(crdGVR).Get(e.ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// widget is a Widget of group as a chart renders it, with the object-set
// label the watcher selects.
func widget(t *testing.T, group string) *unstructured.Unstructured {
	return obj(t, fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata: {name: w, namespace: %s, labels: {drift-test: x}}\nspec: {size: 1}\n", group, crdWatNS))
}

func (e *crdEnv) widgets(group string) dynamic.ResourceInterface {
	return e.dyn.Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}).Namespace(crdWatNS)
}

// editWidget is a user changing the Widget's size on the cluster.
func (e *crdEnv) editWidget(group string) {
	e.t.Helper()
	live, err := e.widgets(group).Get(e.ctx, "w", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	_ = unstructured.SetNestedField(live.Object, int64(7), "spec", "size")
	if _, err := e.widgets(group).Update(e.ctx, live, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// deployAndEdit creates the Widget as the deployer would, waits until the
// watcher told bd about it (the agent re-evaluates on that) and evaluating
// shows it as deployed; then a user edits it, and it waits until that edit
// is told to bd and evaluating reports the Widget modified.
func (e *crdEnv) deployAndEdit(bd types.NamespacedName, desired *unstructured.Unstructured) {
	e.t.Helper()
	before := e.notified(bd)
	group := desired.GroupVersionKind().Group
	if _, err := e.widgets(group).Create(e.ctx, desired.DeepCopy(), metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.told(bd, desired, before, "the deployed Widget followed", "")
	before = e.notified(bd)
	e.editWidget(group)
	e.told(bd, desired, before, "drift of the Widget detected", `{"spec":{"size":1}}`)
}

// told waits until bd was told something since before, and evaluating
// desired gives patch ("" for no drift).
func (e *crdEnv) told(bd types.NamespacedName, desired *unstructured.Unstructured, before int, what, patch string) {
	e.t.Helper()
	eventually(e.t, what, func() error {
		if n := e.notified(bd); n <= before {
			return fmt.Errorf("%s not told", bd)
		}
		r, err := Evaluate([]*unstructured.Unstructured{desired}, func(d *unstructured.Unstructured) (*unstructured.Unstructured, error) {
			return e.w.Live(e.ctx, d)
		}, Options{})
		if err != nil {
			return err
		}
		switch {
		case patch == "" && len(r.Modified) == 0:
			return nil
		case patch != "" && len(r.Modified) == 1 && r.Modified[0].Patch == patch:
			return nil
		}
		return fmt.Errorf("evaluation: %+v", r.Modified)
	})
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(recoverTimeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, recoverTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A BundleDeployment watched while its custom resource's kind is unknown
// (the CRD comes from another bundle, or was deleted downstream, when the
// agent starts) has that resource followed once the CRD is served: a
// user's edit of it is reported as drift, without waiting for a redeploy or
// the periodic resync.
func TestWatchFollowsCustomResourceOnceCRDExists(t *testing.T) {
	e := newCRDEnv(t)
	const group = "later.drift.example.com"
	bd := types.NamespacedName{Namespace: "cluster-ns", Name: "later"}
	desired := widget(t, group)
	if err := e.w.Watch(bd, []*unstructured.Unstructured{desired}); err != nil {
		t.Fatal(err)
	}
	e.createCRD(group)
	e.deployAndEdit(bd, desired)
}

// A kind the cached discovery still maps although its CRD was deleted does
// not block Watch until the informer gives up (60 s, a reconcile worker
// held meanwhile): Watch returns, the Widget is reported missing, and it is
// followed again once the CRD is back.
func TestWatchDoesNotHangOnDeletedCRD(t *testing.T) {
	e := newCRDEnv(t)
	const group = "stale.drift.example.com"
	desired := widget(t, group)
	e.createCRD(group)
	first := types.NamespacedName{Namespace: "cluster-ns", Name: "first"}
	if err := e.w.Watch(first, []*unstructured.Unstructured{desired}); err != nil {
		t.Fatal(err)
	}
	e.w.Forget(first)
	e.deleteCRD(group)

	bd := types.NamespacedName{Namespace: "cluster-ns", Name: "stale"}
	done := make(chan error, 1)
	go func() { done <- e.w.Watch(bd, []*unstructured.Unstructured{desired}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
	case <-time.After(recoverTimeout):
		t.Fatalf("Watch still blocked after %s on a kind whose CRD was deleted", recoverTimeout)
	}
	r, err := Evaluate([]*unstructured.Unstructured{desired}, func(d *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return e.w.Live(e.ctx, d)
	}, Options{})
	if err != nil || len(r.Modified) != 1 || !r.Modified[0].Create {
		t.Fatalf("the Widget of a deleted CRD is not reported missing: %+v, %v", r.Modified, err)
	}

	e.createCRD(group)
	e.deployAndEdit(bd, desired)
}

// A CRD deleted and re-created under a watched custom resource (someone
// reinstalls an operator) is followed again promptly: the informer of the
// vanished resource does not sit in client-go's backoff with an empty
// cache, reporting the re-created Widget missing.
func TestWatchRecoversWhenCRDIsRecreated(t *testing.T) {
	e := newCRDEnv(t)
	const group = "again.drift.example.com"
	desired := widget(t, group)
	e.createCRD(group)
	bd := types.NamespacedName{Namespace: "cluster-ns", Name: "again"}
	if err := e.w.Watch(bd, []*unstructured.Unstructured{desired}); err != nil {
		t.Fatal(err)
	}
	e.deployAndEdit(bd, desired)
	e.deleteCRD(group)
	e.createCRD(group)
	e.deployAndEdit(bd, desired)
}
