package deployer

import (
	"context"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestDeployErrorQuotesNoValue: Helm's and the API server's errors quote
// values (a values schema's pattern error, a rejected label), and the
// error reaches the BundleDeployment's Deployed condition and every summary
// above it. No value may show there, whether the bundle's own helm.values
// (which the manager keeps in a Secret) or a valuesFrom Secret's, nor the
// escaped forms (Go-quoted, JSON, the schema validator's) of a value with a
// quote, a backslash or a newline, as a PEM key has.
func TestDeployErrorQuotesNoValue(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	const ns = "redact-deploy"
	if _, err := down.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const (
		plain = "hunter2-bundle-values"
		// From the valuesFrom Secret: a quote, a backslash, a newline.
		fromSecret = "hunter2\"quote\\back\nsecond-line"
	)
	secretYAML := "token: " + strconv.Quote(fromSecret) + "\nlabel: " + strconv.Quote(fromSecret) + "\n"
	if _, err := down.Clientset.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns},
		Data: map[string][]byte{"values.yaml": []byte(secretYAML)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	chart := func(schema bool) map[string]string {
		files := map[string]string{
			"chart/Chart.yaml": chartYAML,
			"chart/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: vals\n" +
				"  labels: {bad: {{ .Values.label | quote }}}\n  annotations: {plain: {{ .Values.password | quote }}}\n",
		}
		if schema {
			files["chart/values.schema.json"] = `{"type": "object", "properties": {` +
				`"password": {"type": "string", "pattern": "^[0-9]+$"}, "token": {"type": "string", "pattern": "^[0-9]+$"}}}`
		}
		return files
	}
	opts := func(label string) fleet.BundleDeploymentOptions {
		return fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{Chart: "chart",
			Values:     &fleet.GenericMap{Data: map[string]any{"password": plain, "label": label}},
			ValuesFrom: []fleet.ValuesFrom{{SecretKeyRef: &fleet.SecretKeySelector{Name: "creds"}}}}}
	}
	// Every form a message could carry the two values in.
	var leaks []string
	for _, v := range []string{plain, fromSecret} {
		leaks = append(leaks, quotedForms(v)...)
	}
	leaks = append(leaks, "hunter2")

	for _, c := range []struct {
		name   string
		files  map[string]string
		opts   fleet.BundleDeploymentOptions
		reason string
	}{
		// Helm's schema validation quotes both values.
		{name: "values schema", files: chart(true), opts: opts("ok"), reason: "does not match pattern"},
		// The API server rejects the label and quotes its value.
		{name: "api validation", files: chart(false), opts: opts(fromSecret), reason: "metadata.labels"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := deployFiles(t, d, "redact-deploy", c.files, c.opts)
			if err == nil {
				t.Fatal("deploy succeeded; want it refused")
			}
			msg := err.Error()
			t.Logf("error: %s", msg)
			if !strings.Contains(msg, c.reason) || !strings.Contains(msg, "(redacted)") {
				t.Fatalf("error %q does not say why (%q) with the values masked", msg, c.reason)
			}
			for _, l := range leaks {
				if strings.Contains(msg, l) {
					t.Errorf("error quotes %q: %s", l, msg)
				}
			}
		})
	}
}
