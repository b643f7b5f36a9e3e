package drift

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestLeafEqual(t *testing.T) {
	res := []string{"spec", "containers", "resources", "limits", "cpu"}
	tests := []struct {
		name string
		path []string
		d, l any
		want bool
	}{
		{"same string", nil, "a", "a", true},
		{"same number", nil, float64(80), float64(80), true},
		{"number stored as quantity", res, float64(1), "1", true},
		{"fraction stored in milli", res, 0.5, "500m", true},
		{"number vs quantity string anywhere", []string{"spec", "x"}, float64(2), "2", true},
		{"number vs other quantity", res, float64(1), "2", false},
		{"number vs non-quantity", []string{"data", "a"}, float64(1), "one", false},
		{"quantity strings in resources", res, "1024Mi", "1Gi", true},
		{"milli strings in resources", res, "0.5", "500m", true},
		{"different quantities", res, "1Gi", "1G", false},
		{"quantity strings elsewhere stay literal", []string{"data", "a"}, "1.0", "1", false},
		{"unparsable in resources", res, "lots", "1", false},
		{"bool vs string", nil, true, "true", false},
		{"emptyDir sizeLimit", []string{"spec", "volumes", "emptyDir", "sizeLimit"}, "0.5Gi", "512Mi", true},
		{"ResourceQuota hard", []string{"spec", "hard", "requests.cpu"}, "2000m", "2", true},
		{"hard elsewhere", []string{"spec", "x", "hard", "a"}, "2000m", "2", false},
		{"LimitRange default", []string{"spec", "limits", "default", "cpu"}, "0.5", "500m", true},
		{"PVC request", []string{"spec", "resources", "requests", "storage"}, "1024Mi", "1Gi", true},
		{"pod overhead", []string{"spec", "overhead", "cpu"}, "0.1", "100m", true},
		{"HPA target", []string{"spec", "metrics", "resource", "target", "averageValue"}, "0.5", "500m", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := leafEqual(tt.path, tt.d, tt.l); got != tt.want {
				t.Fatalf("leafEqual(%v, %#v, %#v) = %v", tt.path, tt.d, tt.l, got)
			}
		})
	}
}

func TestNormalizeDesired(t *testing.T) {
	secret := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	tests := []struct {
		name     string
		gvk      schema.GroupVersionKind
		in, want string
		changed  bool
	}{
		{"stringData folded", secret, `{"stringData":{"a":"x"}}`, `{"data":{"a":"eA=="}}`, true},
		{"stringData overrides data", secret, `{"data":{"a":"eQ==","b":"eQ=="},"stringData":{"a":"x"}}`, `{"data":{"a":"eA==","b":"eQ=="}}`, true},
		{"non-string stringData kept", secret, `{"stringData":{"a":1}}`, `{"data":{},"stringData":{"a":1}}`, true},
		{"wrapped base64", secret, `{"data":{"a":"eA\n==\n"}}`, `{"data":{"a":"eA=="}}`, true},
		{"invalid base64 kept", secret, `{"data":{"a":"!!"}}`, `{"data":{"a":"!!"}}`, false},
		{"configmap binaryData", schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, `{"binaryData":{"a":"eA\n=="},"data":{"b":"eA\n=="}}`, `{"binaryData":{"a":"eA=="},"data":{"b":"eA\n=="}}`, true},
		{"other group untouched", schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Secret"}, `{"stringData":{"a":"x"}}`, `{"stringData":{"a":"x"}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d map[string]any
			if err := json.Unmarshal([]byte(tt.in), &d); err != nil {
				t.Fatal(err)
			}
			changed := normalizeDesired(tt.gvk, d)
			got, _ := json.Marshal(d)
			if string(got) != tt.want || changed != tt.changed {
				t.Fatalf("got %s (changed %v), want %s (changed %v)", got, changed, tt.want, tt.changed)
			}
		})
	}
}

func TestRedactSecretPatch(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"data":{"a":"c2VjcmV0","b":null}}`, `{"data":{"a":"(redacted)","b":null}}`},
		{`{"stringData":{"a":"secret"}}`, `{"stringData":{"a":"(redacted)"}}`},
		{`{"data":"c2VjcmV0"}`, `{"data":"(redacted)"}`},
		{`{"metadata":{"labels":{"a":"b"}},"type":"Opaque","other":{"x":["secret"]}}`, `{"metadata":{"labels":{"a":"b"}},"other":{"x":"(redacted)"},"type":"Opaque"}`},
	}
	for _, tt := range tests {
		got, err := redactSecretPatch([]byte(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want || strings.Contains(string(got), "secret") || strings.Contains(string(got), "c2VjcmV0") {
			t.Fatalf("redact(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
	if _, err := redactSecretPatch([]byte(`{"data":"hunter2`)); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("invalid patch: %v", err)
	}
}
