package drift

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// A Service's nodePort, healthCheckNodePort, clusterIP, clusterIPs and
// ipFamilies left to the API server (0, "" or [], as a chart renders an
// unset value) are the server's to choose, exactly like an omitted field:
// what it assigned is not drift. A value the chart pins is still compared.
func TestDiffServerAssignedServiceFields(t *testing.T) {
	const svc = "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: ns}\nspec:\n"
	const live = svc + `  type: LoadBalancer
  externalTrafficPolicy: Local
  healthCheckNodePort: 31999
  clusterIP: 10.0.0.12
  clusterIPs: [10.0.0.12]
  ipFamilies: [IPv4]
  ports: [{name: http, port: 80, protocol: TCP, targetPort: 80, nodePort: 31080}, {name: https, port: 443, protocol: TCP, targetPort: 443, nodePort: 31443}]
`
	tests := []struct {
		name      string
		desired   string
		live      string
		modified  bool
		wantPatch string
	}{
		{name: "nodePort 0 is assigned",
			desired: svc + "  type: LoadBalancer\n  externalTrafficPolicy: Local\n  ports: [{name: http, port: 80, nodePort: 0}, {name: https, port: 443, nodePort: 0}]\n",
			live:    live},
		{name: "omitted nodePort is assigned",
			desired: svc + "  type: LoadBalancer\n  externalTrafficPolicy: Local\n  ports: [{name: http, port: 80}, {name: https, port: 443}]\n",
			live:    live},
		{name: "clusterIP, clusterIPs and healthCheckNodePort left to the server",
			desired: svc + "  type: LoadBalancer\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 0\n  clusterIP: ''\n  clusterIPs: []\n  ipFamilies: []\n  ports: [{name: http, port: 80, nodePort: 0}, {name: https, port: 443}]\n",
			live:    live},
		{name: "empty clusterIP, clusterIPs absent",
			desired: svc + "  clusterIP: ''\n  ports: [{name: http, port: 80}, {name: https, port: 443}]\n",
			live:    live},
		{name: "a pinned nodePort changed on the cluster is drift",
			desired: svc + "  type: LoadBalancer\n  externalTrafficPolicy: Local\n  ports: [{name: http, port: 80, nodePort: 30080}, {name: https, port: 443, nodePort: 0}]\n",
			live:    live, modified: true},
		{name: "a pinned nodePort as assigned",
			desired: svc + "  ports: [{name: http, port: 80, nodePort: 31080}, {name: https, port: 443, nodePort: 0}]\n",
			live:    live},
		{name: "a pinned healthCheckNodePort changed on the cluster is drift",
			desired: svc + "  healthCheckNodePort: 30999\n  ports: [{name: http, port: 80}, {name: https, port: 443}]\n",
			live:    live, modified: true, wantPatch: `{"spec":{"healthCheckNodePort":30999}}`},
		{name: "a pinned clusterIP changed on the cluster is drift",
			desired: svc + "  clusterIP: 10.0.0.50\n  clusterIPs: [10.0.0.50]\n  ports: [{name: http, port: 80}, {name: https, port: 443}]\n",
			live:    live, modified: true, wantPatch: `{"spec":{"clusterIP":"10.0.0.50","clusterIPs":["10.0.0.50"]}}`},
		{name: "headless clusterIP None is compared",
			desired: svc + "  clusterIP: None\n  ports: [{name: http, port: 80}, {name: https, port: 443}]\n",
			live:    live, modified: true, wantPatch: `{"spec":{"clusterIP":"None"}}`},
		{name: "other drift in the ports does not show the assigned nodePort",
			desired: svc + "  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 0}, {name: https, port: 443}]\n",
			live:    live, modified: true},
		{name: "a custom resource's nodePort 0 is compared",
			desired: "apiVersion: example.com/v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80, nodePort: 0}]}\n",
			live:    "apiVersion: example.com/v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80, nodePort: 31080}]}\n", modified: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modified, patch, err := Diff(obj(t, tt.desired), obj(t, tt.live), nil)
			if err != nil {
				t.Fatal(err)
			}
			if modified != tt.modified {
				t.Fatalf("modified = %v, patch %s", modified, patch)
			}
			if tt.wantPatch != "" && patch != tt.wantPatch {
				t.Fatalf("patch = %s, want %s", patch, tt.wantPatch)
			}
			if strings.Contains(patch, "31080") || strings.Contains(patch, "31443") {
				t.Fatalf("patch restores a port the server assigned: %s", patch)
			}
		})
	}
}

// Against a real API server: Services whose ports and IPs the server
// assigned are not Modified, and editing a pinned nodePort or an assigned
// one the chart does not set behaves as for any field (drift, no drift).
func TestServiceAssignedFieldsAgainstAPIServer(t *testing.T) {
	c := apiServer(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(ctx, WatcherOptions{Config: c.Config, Label: "drift-test", Notify: func(types.NamespacedName) {}})
	if err != nil {
		t.Fatal(err)
	}
	ns := testNamespace(t, dyn, "drift-svc-")
	nodePort := obj(t, `apiVersion: v1
kind: Service
metadata: {name: np}
spec:
  type: NodePort
  clusterIP: ""
  clusterIPs: []
  selector: {app: x}
  ports:
  - {name: http, port: 80, targetPort: 8080, nodePort: 0}
  - {name: pinned, port: 81, targetPort: 8081, nodePort: 30081}
`)
	lb := obj(t, `apiVersion: v1
kind: Service
metadata: {name: lb}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  healthCheckNodePort: 0
  clusterIP: ""
  ipFamilies: []
  selector: {app: x}
  ports:
  - {name: http, port: 80, nodePort: 0}
`)
	desired := []*unstructured.Unstructured{nodePort, lb}
	for _, o := range desired {
		o.SetNamespace(ns)
	}
	res := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Namespace(ns)
	for _, o := range desired {
		if _, err := res.Create(ctx, o.DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
		// Frees the pinned node ports for the next run (-count).
		t.Cleanup(func() { _ = res.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{}) })
	}
	// The server did assign what the manifests leave to it.
	stored, err := res.Get(ctx, "lb", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc, _, _ := unstructured.NestedInt64(stored.Object, "spec", "healthCheckNodePort")
	ip, _, _ := unstructured.NestedString(stored.Object, "spec", "clusterIP")
	ports, _, _ := unstructured.NestedSlice(stored.Object, "spec", "ports")
	if hc == 0 || ip == "" || len(ports) != 1 || ports[0].(map[string]any)["nodePort"] == nil {
		t.Fatalf("server assigned nothing: %v", stored.Object["spec"])
	}
	evaluate := func() Result {
		t.Helper()
		r, err := Evaluate(desired, func(d *unstructured.Unstructured) (*unstructured.Unstructured, error) {
			return w.Live(ctx, d)
		}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := evaluate(); !r.NonModified || len(r.Modified) != 0 {
		t.Fatalf("Services as the API server assigned them reported modified: %+v", r.Modified)
	}

	setNodePorts := func(name string, ports ...int64) {
		t.Helper()
		live, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lp, _, _ := unstructured.NestedSlice(live.Object, "spec", "ports")
		for i, p := range ports {
			lp[i].(map[string]any)["nodePort"] = p
		}
		_ = unstructured.SetNestedSlice(live.Object, lp, "spec", "ports")
		if _, err := res.Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Someone moves the port the server chose: still the server's (and
	// now the user's) choice, as if the chart omitted it.
	setNodePorts("lb", 30100)
	if r := evaluate(); !r.NonModified {
		t.Fatalf("a moved assigned nodePort reported modified: %+v", r.Modified)
	}
	// Someone moves the pinned port: drift, and the patch restores it.
	live, err := res.Get(ctx, "np", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lp, _, _ := unstructured.NestedSlice(live.Object, "spec", "ports")
	setNodePorts("np", lp[0].(map[string]any)["nodePort"].(int64), 30181)
	r := evaluate()
	if r.NonModified || len(r.Modified) != 1 || r.Modified[0].Name != "np" || !strings.Contains(r.Modified[0].Patch, `"nodePort":30081`) {
		t.Fatalf("a moved pinned nodePort is not reported: %+v", r.Modified)
	}
}

// testNamespace creates a namespace named from prefix, new on every run:
// the package's API server has no namespace controller, so a namespace is
// never deleted, and a test can run again (-count) only in a new one.
func testNamespace(t *testing.T, dyn dynamic.Interface, prefix string) string {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"generateName": prefix}}}
	created, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created.GetName()
}
