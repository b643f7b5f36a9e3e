package drift

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func obj(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

const desiredDeploy = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: ns, labels: {app: x}}
spec:
  replicas: 2
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      containers:
      - name: c
        image: img:1
        resources: {}
        ports: [{containerPort: 80}]
`

// live has what the API server adds: defaults, status, server metadata.
const liveDeploy = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  namespace: ns
  uid: 123
  resourceVersion: "7"
  generation: 1
  labels: {app: x}
  annotations: {deployment.kubernetes.io/revision: "1"}
  managedFields: [{manager: helm}]
spec:
  replicas: 2
  progressDeadlineSeconds: 600
  revisionHistoryLimit: 10
  selector: {matchLabels: {app: x}}
  strategy: {type: RollingUpdate}
  template:
    metadata: {labels: {app: x}}
    spec:
      containers:
      - name: c
        image: img:1
        imagePullPolicy: IfNotPresent
        terminationMessagePath: /dev/termination-log
        ports: [{containerPort: 80, protocol: TCP}]
      restartPolicy: Always
status: {replicas: 2}
`

func TestDiff(t *testing.T) {
	tests := []struct {
		name      string
		desired   string
		live      string
		patches   []fleet.ComparePatch
		modified  bool
		wantPatch string
	}{
		{name: "server defaults are not drift", desired: desiredDeploy, live: liveDeploy},
		{name: "changed replicas", desired: desiredDeploy, live: replace(liveDeploy, "replicas: 2\n  progress", "replicas: 5\n  progress"),
			modified: true, wantPatch: `{"spec":{"replicas":2}}`},
		{name: "replicas ignored by comparePatches (HPA)", desired: desiredDeploy,
			live:    replace(liveDeploy, "replicas: 2\n  progress", "replicas: 5\n  progress"),
			patches: []fleet.ComparePatch{{Kind: "Deployment", Name: "app", Operations: []fleet.Operation{{Op: "remove", Path: "/spec/replicas"}}}}},
		{name: "jsonPointers of another object do not apply", desired: desiredDeploy,
			live:     replace(liveDeploy, "replicas: 2\n  progress", "replicas: 5\n  progress"),
			patches:  []fleet.ComparePatch{{Kind: "Deployment", Name: "other", JSONPointers: []string{"/spec/replicas"}}},
			modified: true, wantPatch: `{"spec":{"replicas":2}}`},
		{name: "changed image in a list", desired: desiredDeploy, live: replace(liveDeploy, "image: img:1", "image: img:2"),
			modified: true},
		{name: "removed label", desired: desiredDeploy, live: replace(liveDeploy, "  labels: {app: x}\n  annotations", "  annotations"),
			modified: true, wantPatch: `{"metadata":{"labels":{"app":"x"}}}`},
		{name: "webhook caBundle injected", desired: "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: w}\nwebhooks:\n- name: a\n  clientConfig: {caBundle: '', url: 'https://x'}\n",
			live: "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: w}\nwebhooks:\n- name: a\n  clientConfig: {caBundle: 'Zm9v', url: 'https://x'}\n  sideEffects: None\n"},
		{name: "number types", desired: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80, targetPort: 8080}]}\n",
			live: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {clusterIP: 10.0.0.1, ports: [{port: 80.0, targetPort: 8080, protocol: TCP}]}\n"},
		{name: "stringData key ignored by a data pointer",
			desired: "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {password: x, user: admin}\n",
			live:    "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {password: b3RoZXI=, user: YWRtaW4=}\n",
			patches: []fleet.ComparePatch{{Kind: "Secret", JSONPointers: []string{"/data/password"}}}},
		{name: "string vs number differ", desired: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}\n",
			live: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '2'}\n", modified: true, wantPatch: `{"data":{"a":"1"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modified, patch, err := Diff(obj(t, tt.desired), obj(t, tt.live), tt.patches)
			if err != nil {
				t.Fatal(err)
			}
			if modified != tt.modified {
				t.Fatalf("modified = %v, patch %s", modified, patch)
			}
			if tt.wantPatch != "" && patch != tt.wantPatch {
				t.Fatalf("patch = %s, want %s", patch, tt.wantPatch)
			}
		})
	}
}

func replace(s, old, repl string) string {
	out := ""
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + repl + s[i+len(old):] + out
		}
	}
	panic("not found: " + old)
}

func TestEvaluateAndReadiness(t *testing.T) {
	desired := []*unstructured.Unstructured{obj(t, desiredDeploy), obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: gone, namespace: ns}\n")}
	live := obj(t, liveDeploy)
	res, err := Evaluate(desired, func(d *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		if d.GetKind() == "Deployment" {
			return live, nil
		}
		return nil, nil
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ready || res.NonModified || res.Counts.Missing != 1 || res.Counts.NotReady != 1 || res.Counts.DesiredReady != 2 {
		t.Fatalf("result %+v", res)
	}
	if len(res.Modified) != 1 || !res.Modified[0].Create || res.Modified[0].Name != "gone" {
		t.Fatalf("modified %+v", res.Modified)
	}
	if len(res.NonReady) != 1 || res.NonReady[0].Summary.State != "InProgress" {
		t.Fatalf("nonReady %+v", res.NonReady)
	}
}

func TestIgnoreConditions(t *testing.T) {
	u := obj(t, `apiVersion: example.com/v1
kind: Thing
metadata: {name: t, generation: 1}
status:
  observedGeneration: 1
  conditions:
  - {type: Ready, status: "False", reason: Sync, message: "external thing not synced"}
`)
	if s := Readiness(u, nil); s.State == "Current" {
		t.Fatalf("expected not ready, got %+v", s)
	}
	if s := Readiness(u, []map[string]string{{"type": "Ready", "reason": "Sync"}}); s.State != "Current" {
		t.Fatalf("ignored condition still counted: %+v", s)
	}
	if s := Readiness(u, []map[string]string{{"type": "Ready", "reason": "Other"}}); s.State == "Current" {
		t.Fatalf("partial match must not ignore: %+v", s)
	}
}

func TestEvaluateCapsLists(t *testing.T) {
	var desired []*unstructured.Unstructured
	for i := 0; i < 12; i++ {
		o := obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: ns}\n")
		o.SetName(string(rune('a' + i)))
		desired = append(desired, o)
	}
	res, err := Evaluate(desired, func(*unstructured.Unstructured) (*unstructured.Unstructured, error) { return nil, nil }, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Modified) != MaxListed || !res.Incomplete || res.Counts.Missing != 12 {
		t.Fatalf("modified %d incomplete %v counts %+v", len(res.Modified), res.Incomplete, res.Counts)
	}
}

// Diff never panics, whatever the objects and pointers.
func FuzzDiff(f *testing.F) {
	f.Add(`{"a":{"b":[1,2]}}`, `{"a":{"b":[1]}}`, "/a/b/0")
	f.Add(`{"kind":"ValidatingWebhookConfiguration","webhooks":[{"clientConfig":{}}]}`, `{}`, "/webhooks/5")
	f.Add(`{"apiVersion":"v1","kind":"Secret","data":"x","stringData":{"a":"b","c":1}}`, `{"data":{"a":1}}`, "/data/a")
	f.Add(`{"apiVersion":"v1","kind":"Pod","spec":{"hostNetwork":false,"containers":[{"name":"c","ports":[{"hostPort":0}]}]}}`, `{"spec":{"containers":[{}]}}`, "/spec/containers/0")
	f.Fuzz(func(t *testing.T, desired, live, pointer string) {
		d, l := &unstructured.Unstructured{}, &unstructured.Unstructured{}
		if d.UnmarshalJSON([]byte(desired)) != nil || l.UnmarshalJSON([]byte(live)) != nil {
			return
		}
		_, _, _ = Diff(d, l, []fleet.ComparePatch{{JSONPointers: []string{pointer}}})
	})
}

// What the API server does to a Secret or to quantities is not drift, and a
// Secret's patch names its drifted keys without their values.
func TestDiffNormalizesAndRedacts(t *testing.T) {
	const secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"
	const pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: %s}]}\n"
	tests := []struct {
		name      string
		desired   string
		live      string
		modified  bool
		wantPatch string
	}{
		{name: "stringData is stored in data", desired: secret + "stringData: {password: hunter2}\n",
			live: secret + "type: Opaque\ndata: {password: aHVudGVyMg==}\n"},
		{name: "stringData wins over data", desired: secret + "data: {password: b2xk}\nstringData: {password: hunter2}\n",
			live: secret + "data: {password: aHVudGVyMg==}\n"},
		{name: "wrapped base64", desired: secret + "data: {cert: \"aHVu\\ndGVyMg==\\n\"}\n",
			live: secret + "data: {cert: aHVudGVyMg==}\n"},
		{name: "changed stringData value is redacted", desired: secret + "stringData: {password: hunter2, user: admin}\n",
			live: secret + "data: {password: b3RoZXI=, user: YWRtaW4=}\n", modified: true, wantPatch: `{"data":{"password":"(redacted)"}}`},
		{name: "changed data value is redacted", desired: secret + "data: {password: aHVudGVyMg==}\n",
			live: secret + "data: {password: b3RoZXI=}\n", modified: true, wantPatch: `{"data":{"password":"(redacted)"}}`},
		{name: "deleted data is redacted", desired: secret + "type: Opaque\ndata: {password: aHVudGVyMg==}\n",
			live: secret + "type: Opaque\n", modified: true, wantPatch: `{"data":{"password":"(redacted)"}}`},
		{name: "secret metadata is kept", desired: "apiVersion: v1\nkind: Secret\nmetadata: {name: s, labels: {a: b}}\ndata: {k: aHVudGVyMg==}\n",
			live: secret + "data: {k: aHVudGVyMg==}\n", modified: true, wantPatch: `{"metadata":{"labels":{"a":"b"}}}`},
		{name: "cpu number vs string", desired: fmt.Sprintf(pod, "{limits: {cpu: 1}, requests: {cpu: 0.5, memory: 1024Mi}}"),
			live: fmt.Sprintf(pod, "{limits: {cpu: '1'}, requests: {cpu: 500m, memory: 1Gi}}")},
		{name: "cpu really changed", desired: fmt.Sprintf(pod, "{limits: {cpu: 1}}"),
			live: fmt.Sprintf(pod, "{limits: {cpu: '2'}}"), modified: true},
		{name: "memory really changed", desired: fmt.Sprintf(pod, "{limits: {memory: 1Gi}}"),
			live: fmt.Sprintf(pod, "{limits: {memory: 1G}}"), modified: true},
		{name: "configmap strings are not quantities", desired: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1.0'}\n",
			live: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}\n", modified: true, wantPatch: `{"data":{"a":"1.0"}}`},
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
			for _, v := range []string{"hunter2", "aHVudGVyMg", "b3RoZXI", "admin", "YWRtaW4"} {
				if strings.Contains(patch, v) {
					t.Fatalf("patch quotes a secret value: %s", patch)
				}
			}
		})
	}
}

// A chart that renders a field the API server does not store (false, 0 or ""
// in a built-in kind's field without a pointer, such as hostNetwork,
// paused, minReadySeconds or a volumeMount's readOnly) is not drift: the
// live object can never show it. A live non-zero value is still drift, and
// so is an absent field whose false the API server would have stored (a
// pointer field, or any field of a custom resource).
func TestDiffZeroValuesTheServerDrops(t *testing.T) {
	const deploy = `apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: ns}
spec:
  paused: %s
  minReadySeconds: 0
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      hostNetwork: %s
      %s
      containers:
      - name: c
        image: img:1
        ports: [{containerPort: 80, hostPort: 0}]
        volumeMounts: [{name: v, mountPath: /v, readOnly: false}]
      volumes: [{name: v, emptyDir: {}}]
`
	// As the API server stores the desired object: no zero field left.
	const stored = `apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: ns, uid: "1", generation: 1}
spec:
  %s
  replicas: 1
  progressDeadlineSeconds: 600
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      %s
      containers:
      - name: c
        image: img:1
        imagePullPolicy: IfNotPresent
        ports: [{containerPort: 80, protocol: TCP}]
        volumeMounts: [{name: v, mountPath: /v}]
      volumes: [{name: v, emptyDir: {}}]
      restartPolicy: Always
`
	const cr = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: ns}\nspec: {size: 1%s}\n"
	tests := []struct {
		name      string
		desired   string
		live      string
		modified  bool
		wantPatch string
	}{
		{name: "explicit false and 0 the server dropped",
			desired: fmt.Sprintf(deploy, "false", "false", ""), live: fmt.Sprintf(stored, "", "")},
		{name: "live hostNetwork true is drift",
			desired: fmt.Sprintf(deploy, "false", "false", ""), live: fmt.Sprintf(stored, "", "hostNetwork: true"),
			modified: true, wantPatch: `{"spec":{"template":{"spec":{"hostNetwork":false}}}}`},
		{name: "live paused true is drift",
			desired: fmt.Sprintf(deploy, "false", "false", ""), live: fmt.Sprintf(stored, "paused: true", ""),
			modified: true, wantPatch: `{"spec":{"paused":false}}`},
		{name: "a pointer field's false is stored: its absence is drift",
			desired: fmt.Sprintf(deploy, "false", "false", "automountServiceAccountToken: false"), live: fmt.Sprintf(stored, "", ""),
			modified: true, wantPatch: `{"spec":{"template":{"spec":{"automountServiceAccountToken":false}}}}`},
		{name: "a pointer field's false as stored",
			desired: fmt.Sprintf(deploy, "false", "false", "automountServiceAccountToken: false"),
			live:    fmt.Sprintf(stored, "", "automountServiceAccountToken: false")},
		{name: "a custom resource's false is stored: its absence is drift",
			desired: fmt.Sprintf(cr, ", enabled: false"), live: fmt.Sprintf(cr, ""),
			modified: true, wantPatch: `{"spec":{"enabled":false}}`},
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
		})
	}
}
