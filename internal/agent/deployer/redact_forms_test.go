package deployer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestRedactValuesEscapedForms: a value with a quote, a backslash, a
// newline or "<" is quoted escaped by the writers of messages; each form is
// masked, and so is one line of a multi-line value. Values shorter than
// minRedacted, and the public names the message needs, are not.
func TestRedactValuesEscapedForms(t *testing.T) {
	const v = "hunter2\"quote\\back\n<second-line>"
	js, _ := json.Marshal(v)
	msgs := []string{
		fmt.Sprintf("Invalid value: %q", v),                                // Go %q (Kubernetes)
		fmt.Sprintf("Invalid value: %+q", v),                               // Go %+q
		"body: " + string(js),                                              // JSON, HTML-escaped
		`at '/token': 'hunter2"quote\\back\n<second-line>' does not match`, // JSON Schema validator
		"line 2: <second-line> is not allowed",                             // one line of the value
	}
	values := appendStrings(nil, map[string]any{"token": v, "short": "abc", "ns": "shared-ns"})
	for _, m := range msgs {
		got := redactValues(errors.New(m+" in shared-ns; abc"), values, "shared-ns").Error()
		if strings.Contains(got, "hunter2") || strings.Contains(got, "second-line") {
			t.Errorf("%q masked as %q", m, got)
		}
		if !strings.HasSuffix(got, " in shared-ns; abc") {
			t.Errorf("%q: a public name or a short value was masked: %q", m, got)
		}
	}
}

// TestPlainValuesMaskedByKey: of helm.values (and valuesFrom ConfigMaps)
// only strings under a key naming a credential are masked, at any depth,
// so that the names a failure is about stay readable; every string of a
// valuesFrom Secret is masked (appendStrings, above).
func TestPlainValuesMaskedByKey(t *testing.T) {
	values := map[string]any{
		"image":    map[string]any{"repository": "nginx-frontend", "pullPolicy": "IfNotPresent"},
		"service":  map[string]any{"name": "web-public"},
		"db":       map[string]any{"password": "s3cr3t-db", "user": "appuser"},
		"auth":     map[string]any{"users": []any{map[string]any{"name": "admin-list-entry"}}},
		"apiKey":   "k-123456",
		"tlsCerts": []any{"-----BEGIN CERT-----"},
	}
	got := appendSensitive(nil, values, false)
	want := map[string]bool{"s3cr3t-db": true, "admin-list-entry": true, "k-123456": true, "-----BEGIN CERT-----": true}
	if len(got) != len(want) {
		t.Fatalf("masked %q, want exactly %v", got, want)
	}
	for _, s := range got {
		if !want[s] {
			t.Errorf("%q masked although no key above it names a credential", s)
		}
	}
	msg := redactValues(errors.New(`Service "web-public" (nginx-frontend): password "s3cr3t-db" refused`), got).Error()
	if strings.Contains(msg, "s3cr3t-db") || !strings.Contains(msg, `"web-public" (nginx-frontend)`) {
		t.Fatalf("message %q: want the password masked and the names kept", msg)
	}
}

// TestSecretNumbersMasked: a number in a valuesFrom Secret (parsed through
// JSON, a float64) is masked as printed; short ones are not.
func TestSecretNumbersMasked(t *testing.T) {
	values := appendStrings(nil, map[string]any{"pin": float64(12345678), "port": float64(80)})
	got := redactValues(errors.New("at '/pin': got 12345678, want string; port 80"), values).Error()
	if strings.Contains(got, "12345678") || !strings.Contains(got, "port 80") {
		t.Fatalf("masked as %q: want the PIN masked and the short number kept", got)
	}
}

// TestURLCredentialsMasked: a URL with credentials in a message is masked
// even when its value sat under a key that names no credential.
func TestURLCredentialsMasked(t *testing.T) {
	got := redactValues(errors.New(`at '/database/url': 'postgres://app:hunter2@db.example.com/app' is not valid`), nil).Error()
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "db.example.com/app") {
		t.Fatalf("masked as %q: want the password masked and the host kept", got)
	}
}
