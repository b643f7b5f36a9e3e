package target

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// locateRenders counts the values documents locate has tried, so that a
// test can show that a search costs the same for 10 clusters as for 1,000.
var locateRenders atomic.Int64

// maxLocateTries bounds how many templated values are rendered on their own
// to find the one that fails.
const maxLocateTries = 200

// maxLocateRendersPerPass bounds locate's renders in one targeting pass
// (one renderer), whatever the number of clusters and failures: two
// searches of maxLocateTries each, a few percent of a pass over 10,000
// clusters that render their values anyway.
const maxLocateRendersPerPass = 2 * maxLocateTries

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
// plain text, until one fails the same way.
//
// A search costs up to maxLocateTries renders of the document, and a
// bundle whose template fails usually fails on every cluster, so a search
// is done once per pass for each failure: the result is kept under the
// bundle's values as written (before label references, which differ per
// cluster but never hold a template) and a failure class that leaves out
// what differs per cluster, such as the cluster value quoted by a function
// error or by YAML (see failureClass). What is left of the cost per cluster
// is hashing the values and reading the error. Failures that differ on
// every cluster cannot share a search (an output that breaks on a
// different line for each cluster, say), so a pass does at most
// maxLocateRendersPerPass renders; past that an error names only
// helm.values, and which clusters got a path depends on the order they
// were visited in.
//
// orig is the values before label references were replaced, values after.
func (r *renderer) locate(orig, values map[string]interface{}, ctx map[string]interface{}, err error) error {
	stage, class := failureClass(err)
	kind := errorKind(err)
	key := locateKey{values: valuesDigest(orig), class: class}
	if e := r.located.found[key]; e != nil {
		return e
	}
	out := &RenderError{Path: "helm.values", Kind: kind}
	if r.located.tries >= maxLocateRendersPerPass {
		// Not kept: it is the answer for every later miss anyway.
		return out
	}
	paths := templatedPaths(values, "helm.values", nil)
	for i := 0; i < len(paths) && i < maxLocateTries && r.located.tries < maxLocateRendersPerPass; i++ {
		n := 0
		data, merr := yaml.Marshal(isolate(values, i, &n))
		if merr != nil {
			break
		}
		r.located.tries++
		verr := tryDocument(stage, string(data), ctx)
		if verr == nil {
			continue
		}
		// A value that fails another way than the document (an if/end
		// split over two values no longer parses alone) is not the one.
		if vstage, _ := failureClass(verr); vstage != stage || (stage == stageExecute && errorKind(verr) != kind) {
			continue
		}
		out = &RenderError{Path: paths[i], Kind: errorKind(verr)}
		break
	}
	if r.located.found == nil {
		r.located.found = map[locateKey]*RenderError{}
	}
	r.located.found[key] = out
	return out
}

// locator is what locate keeps during one targeting pass (one renderer).
type locator struct {
	// found is the answer of each search done.
	found map[locateKey]*RenderError
	// tries counts the documents rendered by all searches.
	tries int
}

// locateKey identifies a search whose answer holds for every cluster:
// the bundle's values as written and the failure class.
type locateKey struct {
	values [sha256.Size]byte
	class  string
}

// Stages of rendering a values document: the stage a failure happened in
// is as far as a search needs to go for each value.
const (
	stageParse = iota
	stageExecute
	stageYAML
)

// execPosition is the line and column of the template action an execution
// error happened at. Clusters with the same values as written marshal them
// to the same lines (a label reference becomes a one-line label value on
// its own line, never a template), so this points at the same action for
// all of them.
var execPosition = regexp.MustCompile(`^template: [^:]*:([0-9]+):([0-9]+): `)

// failureClass is the stage err happened in and a class that is equal for
// two clusters whose values document fails at the same place the same
// way, without what differs per cluster (the cluster value a function
// quotes, the rendered text YAML quotes):
//   - a parse error depends on the template text alone;
//   - an execution error on the action it happened at and its kind;
//   - a YAML error on the output line and fixed problem errorKind keeps,
//     so that clusters whose output breaks at different values do not
//     share an answer.
func failureClass(err error) (int, string) {
	var ny *notYAMLError
	if errors.As(err, &ny) {
		return stageYAML, "yaml\x00" + errorKind(err)
	}
	var ee template.ExecError
	if errors.As(err, &ee) {
		pos := ""
		if m := execPosition.FindStringSubmatch(err.Error()); m != nil {
			pos = m[1] + ":" + m[2]
		}
		return stageExecute, "exec\x00" + pos + "\x00" + errorKind(err)
	}
	return stageParse, "parse"
}

// tryDocument takes a values document as far as stage and returns the
// first error.
func tryDocument(stage int, text string, ctx map[string]interface{}) error {
	locateRenders.Add(1)
	t, err := newTemplate("values").Parse(text)
	if err != nil || stage == stageParse {
		return err
	}
	var b strings.Builder
	if err := t.Execute(&b, ctx); err != nil || stage == stageExecute {
		return err
	}
	out := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(b.String()), &out); err != nil {
		return &notYAMLError{err: err}
	}
	return nil
}

// valuesDigest hashes values so that equal digests mean equal values,
// without keeping or marshalling them.
func valuesDigest(v interface{}) [sha256.Size]byte {
	h := sha256.New()
	hashValue(h, v)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// hashValue writes v to h, each part tagged with its type and each
// string and collection with its length, so that no two values write the
// same bytes. It runs for every failing cluster, so it avoids fmt for the
// common types.
func hashValue(h hash.Hash, v interface{}) {
	switch t := v.(type) {
	case map[string]interface{}:
		hashHeader(h, 'm', len(t))
		for _, k := range sortedKeys(t) {
			hashHeader(h, 'k', len(k))
			h.Write([]byte(k))
			hashValue(h, t[k])
		}
	case []interface{}:
		hashHeader(h, 'l', len(t))
		for _, x := range t {
			hashValue(h, x)
		}
	case string:
		hashHeader(h, 's', len(t))
		h.Write([]byte(t))
	default:
		s := fmt.Sprintf("%T:%v", t, t)
		hashHeader(h, 'o', len(s))
		h.Write([]byte(s))
	}
}

// hashHeader writes a type tag and a length.
func hashHeader(h hash.Hash, tag byte, n int) {
	var b [9]byte
	b[0] = tag
	binary.LittleEndian.PutUint64(b[1:], uint64(n))
	h.Write(b[:])
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
