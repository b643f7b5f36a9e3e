package deployer

import (
	"errors"
	"testing"
)

func TestRedactValues(t *testing.T) {
	base := errors.New("at '/db/password': 'hunter2-x' does not match pattern; at '/token': 'abcd' too short; flag 'yes'")
	secret := appendStrings(nil, map[string]any{"db": map[string]any{"password": "hunter2-x", "port": 5432.0}, "token": "abcd", "flag": "yes",
		"list": []any{"hunter2"}})
	err := redactValues(base, secret)
	want := "at '/db/password': '(redacted)' does not match pattern; at '/token': '(redacted)' too short; flag 'yes'"
	if err.Error() != want {
		t.Errorf("got  %q\nwant %q", err.Error(), want)
	}
	if !errors.Is(err, base) {
		t.Error("the redacted error no longer wraps the original")
	}
	if got := redactValues(base, nil); got != base {
		t.Error("without Secret values the error must be returned as is")
	}
	if redactValues(nil, secret) != nil {
		t.Error("nil error")
	}
}
