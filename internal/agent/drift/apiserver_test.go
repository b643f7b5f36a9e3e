package drift

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// What the API server does to a chart's manifests (stringData folded into
// data, base64 re-encoded, quantities canonicalized, explicit false values
// it does not store dropped) is not drift; a real
// edit still is, and a modified Secret's patch quotes none of its values.
func TestDiffAgainstAPIServer(t *testing.T) {
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

	const (
		clearPassword = "s3cret-clear-value"
		userPassword  = "changed-by-someone"
	)
	b64 := base64.StdEncoding.EncodeToString
	cert := b64([]byte(strings.Repeat("certificate-bytes-", 6)))
	wrapped := cert[:64] + "\n" + cert[64:] + "\n" // how `base64` wraps lines
	secret := obj(t, `apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: drift}
data:
  user: `+b64([]byte("admin"))+`
  password: `+b64([]byte("overridden-by-stringData"))+`
  cert: |
`+indent(wrapped, "    ")+`
stringData:
  password: `+clearPassword+`
  token: plain-token-value
`)
	deploy := obj(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: drift}
spec:
  paused: false
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      hostNetwork: false
      containers:
      - name: c
        image: img:1
        volumeMounts: [{name: tmp, mountPath: /tmp, readOnly: false}]
        resources:
          limits: {cpu: 1, memory: 1024Mi}
          requests: {cpu: 0.5, memory: 1Gi, ephemeral-storage: 1e3}
      volumes:
      - name: tmp
        emptyDir: {sizeLimit: 0.5Gi}
`)
	quota := obj(t, `apiVersion: v1
kind: ResourceQuota
metadata: {name: q, namespace: drift}
spec:
  hard: {pods: 10, requests.cpu: 2000m, limits.memory: 2048Mi}
`)
	limits := obj(t, `apiVersion: v1
kind: LimitRange
metadata: {name: l, namespace: drift}
spec:
  limits:
  - type: Container
    default: {cpu: 0.5}
    defaultRequest: {memory: 0.25Gi}
`)
	desired := []*unstructured.Unstructured{secret, deploy, quota, limits}
	ns := testNamespace(t, dyn, "drift-")
	for _, o := range desired {
		o.SetNamespace(ns)
	}
	gvrs := map[string]schema.GroupVersionResource{
		"Secret":        {Version: "v1", Resource: "secrets"},
		"Deployment":    {Group: "apps", Version: "v1", Resource: "deployments"},
		"ResourceQuota": {Version: "v1", Resource: "resourcequotas"},
		"LimitRange":    {Version: "v1", Resource: "limitranges"},
	}
	res := func(o *unstructured.Unstructured) dynamic.ResourceInterface {
		return dyn.Resource(gvrs[o.GetKind()]).Namespace(o.GetNamespace())
	}
	for _, o := range desired {
		if _, err := res(o).Create(ctx, o.DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", o.GetKind(), err)
		}
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
		t.Fatalf("objects as the API server stored them reported modified: %+v", r.Modified)
	}

	// A user edits the Secret's password and the Deployment's CPU limit.
	live, err := res(secret).Get(ctx, "creds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(live.Object, b64([]byte(userPassword)), "data", "password"); err != nil {
		t.Fatal(err)
	}
	if _, err := res(secret).Update(ctx, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	live, err = res(deploy).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(live.Object, "spec", "template", "spec", "containers")
	_ = unstructured.SetNestedField(containers[0].(map[string]any), "2", "resources", "limits", "cpu")
	_ = unstructured.SetNestedSlice(live.Object, containers, "spec", "template", "spec", "containers")
	if _, err := res(deploy).Update(ctx, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	r := evaluate()
	if r.NonModified || len(r.Modified) != 2 || r.Modified[0].Kind != "Deployment" || r.Modified[1].Kind != "Secret" {
		t.Fatalf("edits not detected: %+v", r.Modified)
	}
	if p := r.Modified[0].Patch; !strings.Contains(p, `"limits":{"cpu":1,`) {
		t.Fatalf("deployment patch %s", p)
	}
	p := r.Modified[1].Patch
	if !strings.Contains(p, `"password"`) || strings.Contains(p, `"user"`) {
		t.Fatalf("secret patch should name the drifted key only: %s", p)
	}
	// Nothing the agent reports quotes a value of the Secret, in clear or
	// base64, desired or live.
	all, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{clearPassword, userPassword, "plain-token-value", "admin", "overridden-by-stringData"} {
		for _, enc := range []string{v, b64([]byte(v))} {
			if strings.Contains(string(all), enc) {
				t.Fatalf("result quotes secret value %q: %s", enc, all)
			}
		}
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n")
}
