package deployer

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fleetgo/fleet/internal/redact"
)

// minRedacted is the shortest value redactValues masks. Masking is by
// substring, so a shorter value ("1", "no", "on") would garble unrelated
// words of every message, and would hide little: a secret that short is
// guessed anyway. Values of 4 characters or more ("true" included) are
// masked wherever they appear.
const minRedacted = 4

// sensitiveKey matches the keys of values that hold credentials by their
// name: password, passwd, pwd, secret, token, key (apiKey, privateKey),
// credential, auth, cert.
var sensitiveKey = regexp.MustCompile(`(?i)(pass(wo?r)?d|pwd|secret|token|key|credential|auth|cert)`)

// appendSensitive adds to out the string leaves of v found under a key
// sensitiveKey matches (at any depth above them). Values written in
// helm.values (or a valuesFrom ConfigMap) are masked only so: masking
// every one of them would turn the names a failure is about ("nginx",
// "default", a Service's name) into "(redacted)" and make the message
// useless, while a value in such a document is readable by whoever reads
// the repository or the ConfigMap anyway. Values from Secrets are all
// masked (appendStrings).
func appendSensitive(out []string, v any, under bool) []string {
	switch t := v.(type) {
	case string:
		if under && len(t) >= minRedacted {
			out = append(out, t)
		}
	case map[string]any:
		for k, e := range t {
			out = appendSensitive(out, e, under || sensitiveKey.MatchString(k))
		}
	case []any:
		for _, e := range t {
			out = appendSensitive(out, e, under)
		}
	}
	return out
}

// appendStrings adds the string leaves of v (maps, lists) to out, and its
// numbers as they are printed: a PIN or a numeric key in a Secret is as
// secret as a string, and a schema error quotes it ("got 12345678").
// Values are parsed through JSON, so numbers are float64s here.
func appendStrings(out []string, v any) []string {
	switch t := v.(type) {
	case string:
		if len(t) >= minRedacted {
			out = append(out, t)
		}
	case float64:
		if s := strconv.FormatFloat(t, 'f', -1, 64); len(s) >= minRedacted {
			out = append(out, s)
		}
	case map[string]any:
		for _, e := range t {
			out = appendStrings(out, e)
		}
	case []any:
		for _, e := range t {
			out = appendStrings(out, e)
		}
	}
	return out
}

// redactValues masks, in err's message, every string of values (see
// values) in each form a message may quote it in (quotedForms). Helm's
// messages may quote values: a values schema's pattern or format error
// ("at '/password': 'x' does not match pattern"), a template's fail or
// required, the API server's validation of a rendered object. The message
// reaches the BundleDeployment's status, the Bundle's and the agent's log.
// Strings in public are never masked: they are the release's name and
// namespace and the BundleDeployment's, which its spec shows anyway and
// which the message needs. errors.Is and errors.As still see err.
//
// Credentials written into URLs (a database DSN, a webhook URL in values
// under an innocent key) are masked as well (redact.URL): the user
// information of every URL with a scheme in the message.
func redactValues(err error, values []string, public ...string) error {
	if err == nil {
		return err
	}
	msg := err.Error()
	var forms []string
	for _, v := range values {
		if !slices.Contains(public, v) {
			forms = append(forms, quotedForms(v)...)
		}
	}
	// Longest first, so that a value containing another is masked whole.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	masked := msg
	for _, f := range slices.Compact(forms) {
		masked = strings.ReplaceAll(masked, f, "(redacted)")
	}
	masked = redact.URL(masked)
	if masked == msg {
		return err
	}
	return &redactedError{err: err, msg: masked}
}

// quotedForms are s as is and as the writers of messages escape it, each
// without its outer quotes: Go's %q (Kubernetes, Helm, and its ASCII-only
// variant), JSON (with and without HTML escaping), and the JSON Schema
// validator's single-quoted form ("'" escaped, '"' not). A value with a
// backslash, a quote or a newline (a PEM key) appears in a message only
// so. A multi-line value's lines (of minRedacted characters or more) are
// masked on their own too: a message may quote the one line it is about.
func quotedForms(s string) []string {
	goq := strconv.Quote(s)
	goq = goq[1 : len(goq)-1]
	ascii := strconv.QuoteToASCII(s)
	out := []string{s, goq, ascii[1 : len(ascii)-1],
		strings.ReplaceAll(strings.ReplaceAll(goq, `\"`, `"`), `'`, `\'`)}
	if b, err := json.Marshal(s); err == nil {
		out = append(out, string(b[1:len(b)-1]))
	}
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(s) == nil {
		j := strings.TrimSuffix(buf.String(), "\n")
		out = append(out, j[1:len(j)-1])
	}
	if strings.Contains(s, "\n") {
		for _, line := range strings.Split(s, "\n") {
			if line = strings.TrimSpace(line); len(line) >= minRedacted {
				out = append(out, line)
			}
		}
	}
	return out
}

type redactedError struct {
	err error
	msg string
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
