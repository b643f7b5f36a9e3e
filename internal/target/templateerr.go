package target

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"
)

// RenderError is a values template that failed for one cluster. Its message
// goes into Bundle status and from there into GitRepo and HelmOp status,
// which more people can read than the values; Go's template and YAML errors
// quote template text, rendered output and values (a password next to a
// broken ${ }, a cluster value a function choked on). So the message names
// only where the error is and what kind it is, in fixed words, and the
// original error is not kept.
type RenderError struct {
	// Path is the option the error is in: helm.values.<path> or
	// helm.templateValues.<key>; just helm.values when the failing template
	// spans several values.
	Path string
	// Kind says what failed without quoting the values.
	Kind string
}

func (e *RenderError) Error() string { return e.Path + ": " + e.Kind }

// notYAMLError marks a rendered output that YAML could not parse.
type notYAMLError struct{ err error }

func (e *notYAMLError) Error() string { return e.err.Error() }

// maxLocateTries bounds how many templated values are rendered on their own
// to find the one that fails.
const maxLocateTries = 200

var (
	// fieldChain is a template field reference such as .ClusterValues.host,
	// matched right after "executing "<name>" at <". A reference in a
	// parsed action is template code, not a value.
	fieldChain = regexp.MustCompile(`^(\.[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)>: `)
	// calledFunc is a function that returned an error. Its name is shown
	// only if it is one of the functions templates can call.
	calledFunc = regexp.MustCompile(`error calling ([A-Za-z_][A-Za-z0-9_]*):`)
	// undefinedFunc is the parser's error for an unknown function name.
	undefinedFunc = regexp.MustCompile(`function "([A-Za-z_][A-Za-z0-9_]*)" not defined`)
	// yamlLine is the line (if given) and problem of a YAML syntax error,
	// anchored at the start so that no "yaml: " inside a quoted value
	// matches. The problem is kept only when it reads like one of the
	// scanner's and parser's fixed texts: lower-case words and at most
	// single quoted punctuation, such as "did not find expected ',' or '}'".
	yamlLine    = regexp.MustCompile(`^(?:error converting YAML to JSON: )?yaml: (?:line ([0-9]+): )?(.*)$`)
	yamlProblem = regexp.MustCompile(`^[a-z][a-z ]*(?:'[^A-Za-z0-9'\s]'[a-z ]*)*$`)
)

// errorKind describes a parse, execution or YAML error in fixed words.
// Only a field reference, a func map name and a line number are taken from
// the error, never text that could be a value.
func errorKind(err error) string {
	var ny *notYAMLError
	if errors.As(err, &ny) {
		kind := "not valid YAML after templating"
		m := yamlLine.FindStringSubmatch(ny.err.Error())
		var detail []string
		if m != nil && m[1] != "" {
			detail = append(detail, "line "+m[1])
		}
		if m != nil && yamlProblem.MatchString(m[2]) {
			detail = append(detail, m[2])
		}
		if len(detail) > 0 {
			kind += " (" + strings.Join(detail, ": ") + ")"
		}
		return kind
	}
	msg := err.Error()
	var ee template.ExecError
	if errors.As(err, &ee) {
		kind := "template execution error"
		at := `executing "` + ee.Name + `" at <`
		if i := strings.Index(msg, at); i >= 0 {
			if m := fieldChain.FindStringSubmatch(msg[i+len(at):]); m != nil {
				kind += " at " + m[1]
			}
		}
		m := calledFunc.FindStringSubmatch(msg)
		switch {
		case m != nil && isFunction(m[1]):
			return fmt.Sprintf("%s (function %s failed)", kind, m[1])
		case m != nil:
			return kind + " (a function failed)"
		case strings.Contains(msg, "map has no entry for key"):
			return kind + " (no such key)"
		case strings.Contains(msg, "can't evaluate field"):
			return kind + " (no such field)"
		case strings.Contains(msg, "nil pointer evaluating"):
			return kind + " (nil value)"
		case strings.Contains(msg, "wrong number of args"):
			return kind + " (wrong number of arguments)"
		case strings.Contains(msg, "wrong type") || strings.Contains(msg, "incompatible types"):
			return kind + " (wrong argument type)"
		case strings.Contains(msg, "can't give argument to non-function"):
			return kind + " (arguments given to something that is not a function)"
		}
		return kind
	}
	kind := "template syntax error"
	switch {
	case strings.Contains(msg, "unclosed action"), strings.Contains(msg, "unexpected EOF"):
		return kind + " (a ${ } is not closed)"
	case strings.Contains(msg, "unterminated"):
		return kind + " (an unterminated quoted string)"
	case strings.Contains(msg, "not defined"):
		// A name Fleet removed from sprig is worth naming: the template is
		// right for Helm but not here. Any other name may be a value the
		// parser read as one (a default without quotes).
		if m := undefinedFunc.FindStringSubmatch(msg); m != nil && slices.Contains(removedFuncs, m[1]) {
			return fmt.Sprintf("%s (function %s is not available in Fleet templates)", kind, m[1])
		}
		return kind + " (an undefined function or variable, or a string without quotes)"
	}
	return kind
}

// builtins are text/template's own functions.
var builtins = map[string]bool{
	"and": true, "call": true, "html": true, "index": true, "slice": true, "js": true, "len": true, "not": true,
	"or": true, "print": true, "printf": true, "println": true, "urlquery": true,
	"eq": true, "ge": true, "gt": true, "le": true, "lt": true, "ne": true,
}

// isFunction reports whether name is a function templates can call, so
// that naming it quotes nothing but Fleet's own function list.
func isFunction(name string) bool { return funcMap[name] != nil || builtins[name] }

// locate turns the error of rendering the whole values document into a
// RenderError naming the value that fails. The document is one template,
// so Go's error points at a line of marshalled YAML (or of the output), and
// an unclosed ${ } is reported where it ran into later values. Instead each
// templated value (or key) is rendered on its own, the others replaced by
// plain text, until one fails. Parse and execution errors are cached per
// document and error, so a bundle failing on every cluster does the search
// once.
func (r *renderer) locate(values map[string]interface{}, text string, ctx map[string]interface{}, err error) error {
	var ny *notYAMLError
	cacheable := !errors.As(err, &ny)
	key := text + "\x00" + err.Error()
	if cacheable {
		if e := r.located[key]; e != nil {
			return e
		}
	}
	out := &RenderError{Path: "helm.values", Kind: errorKind(err)}
	paths := templatedPaths(values, "helm.values", nil)
	for i := 0; i < len(paths) && i < maxLocateTries; i++ {
		n := 0
		data, merr := yaml.Marshal(isolate(values, i, &n))
		if merr != nil {
			break
		}
		if _, verr := renderDocument("values", string(data), ctx); verr != nil {
			out = &RenderError{Path: paths[i], Kind: errorKind(verr)}
			break
		}
	}
	if cacheable {
		if r.located == nil {
			r.located = map[string]error{}
		}
		r.located[key] = out
	}
	return out
}

// renderDocument parses, executes and reads back a values document without
// the renderer's cache (the variants locate tries are used once).
func renderDocument(name, text string, ctx map[string]interface{}) (map[string]interface{}, error) {
	t, err := newTemplate(name).Parse(text)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	if err := t.Execute(&b, ctx); err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(b.String()), &out); err != nil {
		return nil, &notYAMLError{err: err}
	}
	return out, nil
}

// newTemplate is a template with Fleet's delimiters, functions and options.
func newTemplate(name string) *template.Template {
	return template.New(name).Funcs(funcMap).Option("missingkey=error").Delims("${", "}")
}

// templatedPaths lists, in the order isolate numbers them, the paths of the
// strings and keys in v that contain a template.
func templatedPaths(v interface{}, path string, out []string) []string {
	switch t := v.(type) {
	case map[string]interface{}:
		for _, k := range sortedKeys(t) {
			p := path + pathSegment(k)
			if strings.Contains(k, "${") {
				out = append(out, p)
			}
			out = templatedPaths(t[k], p, out)
		}
	case []interface{}:
		for i, x := range t {
			out = templatedPaths(x, path+"["+strconv.Itoa(i)+"]", out)
		}
	case string:
		if strings.Contains(t, "${") {
			out = append(out, path)
		}
	}
	return out
}

// isolate returns a copy of v in which every templated string and key but
// the keep-th (counted by *n in templatedPaths' order) is plain text.
func isolate(v interface{}, keep int, n *int) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for _, k := range sortedKeys(t) {
			nk := k
			if strings.Contains(k, "${") {
				if *n != keep {
					nk = fmt.Sprintf("fleet-template-placeholder-%d", *n)
				}
				*n++
			}
			out[nk] = isolate(t[k], keep, n)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, x := range t {
			out[i] = isolate(x, keep, n)
		}
		return out
	case string:
		if !strings.Contains(t, "${") {
			return t
		}
		i := *n
		*n++
		if i != keep {
			return ""
		}
		return t
	default:
		return v
	}
}

// simpleKey is a key that reads unambiguously after a dot.
var simpleKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// pathSegment is how key k appears in a values path. A templated key is
// not spelled out: its text is a template.
func pathSegment(k string) string {
	switch {
	case strings.Contains(k, "${"):
		return ".<templated key>"
	case simpleKey.MatchString(k):
		return "." + k
	default:
		return "[" + strconv.Quote(k) + "]"
	}
}
