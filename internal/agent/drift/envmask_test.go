package drift

import (
	"strings"
	"testing"
)

// TestDiffMasksEnvValuesInPatch: a merge patch replaces lists whole, so an
// image changed by hand in one container puts every container of the pod
// template, with its literal env values (often Helm values: a password),
// into the patch status shows. The env values are masked there; the
// image, the env names and valueFrom stay, and other kinds keep their
// values.
func TestDiffMasksEnvValuesInPatch(t *testing.T) {
	const pod = `
      initContainers:
      - name: init
        image: IMAGE
        env: [{name: INIT_TOKEN, value: hunter2-init}]
      containers:
      - name: c
        image: IMAGE
        env:
        - {name: PASSWORD, value: hunter2-env}
        - {name: FROM_SECRET, valueFrom: {secretKeyRef: {name: s, key: k}}}
`
	deploy := func(image string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app, namespace: ns}\n" +
			"spec:\n  template:\n    spec:" + strings.ReplaceAll(pod, "IMAGE", image)
	}
	cronJob := func(image string) string {
		return "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: job, namespace: ns}\n" +
			"spec:\n  jobTemplate:\n    spec:\n      template:\n        spec:" +
			strings.ReplaceAll(strings.ReplaceAll(pod, "\n      ", "\n          "), "IMAGE", image)
	}
	for _, c := range []struct {
		name          string
		desired, live string
		want, hidden  []string
	}{
		{name: "deployment image drift", desired: deploy("img:1"), live: deploy("img:2"),
			want:   []string{`"image":"img:1"`, `"name":"PASSWORD","value":"(redacted)"`, `"name":"INIT_TOKEN","value":"(redacted)"`, `"valueFrom"`},
			hidden: []string{"hunter2"}},
		{name: "deployment env value drift", desired: deploy("img:1"), live: strings.Replace(deploy("img:1"), "hunter2-env", "other", 1),
			want:   []string{`"name":"PASSWORD","value":"(redacted)"`},
			hidden: []string{"hunter2", "other"}},
		{name: "cronjob", desired: cronJob("img:1"), live: cronJob("img:2"),
			want:   []string{`"jobTemplate"`, `"image":"img:1"`, `"value":"(redacted)"`},
			hidden: []string{"hunter2"}},
		{name: "configmap keeps its values", desired: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\ndata: {value: hunter2-cm}\n",
			live: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\ndata: {value: x}\n",
			want: []string{`{"data":{"value":"hunter2-cm"}}`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			modified, patch, err := Diff(obj(t, c.desired), obj(t, c.live), nil)
			if err != nil || !modified {
				t.Fatalf("modified %v, err %v; want modified", modified, err)
			}
			for _, w := range c.want {
				if !strings.Contains(patch, w) {
					t.Errorf("patch %s lacks %s", patch, w)
				}
			}
			for _, h := range c.hidden {
				if strings.Contains(patch, h) {
					t.Errorf("patch %s shows %q", patch, h)
				}
			}
		})
	}
}
