// Package bundlereader turns directories of a repository into Bundles: it
// finds bundle roots, parses fleet.yaml, collects the files (honouring
// .fleetignore), downloads Helm charts so agents never need a chart
// repository, and assembles targets the way Fleet does.
package bundlereader

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// FleetYAML is the content of a fleet.yaml file: a BundleSpec plus the keys
// that only exist in the file.
type FleetYAML struct {
	// Name, when set, is the Bundle name as written (Rancher Fleet's
	// behaviour); see validateBundleName.
	Name string `json:"name,omitempty"`
	// Labels are copied onto the Bundle.
	Labels map[string]string `json:"labels,omitempty"`

	fleet.BundleSpec `json:",inline"`

	// TargetCustomizations are appended to the bundle's targets.
	TargetCustomizations []fleet.BundleTarget `json:"targetCustomizations,omitempty"`
	// ImageScans are parsed for compatibility and ignored with a warning:
	// image scanning is not implemented (Fleet's is off by default).
	ImageScans []ImageScan `json:"imageScans,omitempty"`
	// OverrideTargets replace the targets of the GitRepo (or --targets-file).
	// Nil (the key absent or null) and empty (overrideTargets: []) differ,
	// as in Rancher Fleet: an empty list still replaces them.
	OverrideTargets []GitTarget `json:"overrideTargets,omitempty"`
}

// ImageScan is one entry of fleet.yaml imageScans.
type ImageScan struct {
	Name     string                 `json:"name,omitempty"`
	TagName  string                 `json:"tagName,omitempty"`
	Image    string                 `json:"image,omitempty"`
	Interval string                 `json:"interval,omitempty"`
	Secret   map[string]interface{} `json:"secretRef,omitempty"`
	Policy   map[string]interface{} `json:"policy,omitempty"`
	Suspend  bool                   `json:"suspend,omitempty"`
}

// GitTarget is a GitRepo-style target as used by overrideTargets.
type GitTarget struct {
	Name                 string                `json:"name,omitempty"`
	ClusterName          string                `json:"clusterName,omitempty"`
	ClusterSelector      *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	ClusterGroup         string                `json:"clusterGroup,omitempty"`
	ClusterGroupSelector *metav1.LabelSelector `json:"clusterGroupSelector,omitempty"`
}

// ParseError is a fleet.yaml that cannot be used; Path names the file.
type ParseError struct {
	Path string
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s: %v", e.Path, e.Err) }
func (e *ParseError) Unwrap() error { return e.Err }

// ParseFleetYAML parses and validates fleet.yaml content. Unknown keys are
// not an error (Fleet accepts them) but are returned as warnings, one per key
// path, sorted, so that typos such as "helm.valuesFile" are visible.
func ParseFleetYAML(data []byte) (*FleetYAML, []string, error) {
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid YAML: %w", err)
	}
	fy := &FleetYAML{}
	trimmed := strings.TrimSpace(string(jsonData))
	if trimmed == "null" || trimmed == "" {
		return fy, nil, nil
	}
	if !strings.HasPrefix(trimmed, "{") {
		return nil, nil, fmt.Errorf("invalid fleet.yaml: the document must be a mapping of keys, not %s", jsonKind(trimmed))
	}
	if err := json.Unmarshal(jsonData, fy); err != nil {
		return nil, nil, fmt.Errorf("invalid fleet.yaml: %w", err)
	}
	var generic interface{}
	if err := json.Unmarshal(jsonData, &generic); err != nil {
		return nil, nil, fmt.Errorf("invalid fleet.yaml: %w", err)
	}
	var warnings []string
	unknownKeys(generic, reflect.TypeOf(FleetYAML{}), "", &warnings)
	stripInternal(fy, &warnings)
	rootTimeoutOff(fy)
	if n := len(fy.ImageScans); n > 0 {
		// As in a Fleet whose image scanning is off (its default): the
		// bundle deploys as written.
		warnings = append(warnings, fmt.Sprintf("imageScans: image scanning is not implemented; %d entries ignored, the manifests deploy as written", n))
	}
	sort.Strings(warnings)
	if err := validate(fy); err != nil {
		return nil, warnings, err
	}
	return fy, warnings, nil
}

func jsonKind(s string) string {
	switch s[0] {
	case '[':
		return "a list"
	case '"':
		return "a string"
	default:
		return "a scalar"
	}
}

var genericMapType = reflect.TypeOf(fleet.GenericMap{})

// unknownKeys walks a decoded JSON value alongside the Go type it was decoded
// into and records keys the type has no field for.
func unknownKeys(v interface{}, t reflect.Type, path string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == genericMapType {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]interface{})
		if !ok {
			return
		}
		fields := map[string]reflect.Type{}
		collectFields(t, fields)
		if len(fields) == 0 { // types with custom JSON (IntOrString, Time)
			return
		}
		for k, sub := range m {
			ft, ok := fields[k]
			if !ok {
				*out = append(*out, fmt.Sprintf("unknown key %q", join(path, k)))
				continue
			}
			unknownKeys(sub, ft, join(path, k), out)
		}
	case reflect.Slice:
		list, ok := v.([]interface{})
		if !ok {
			return
		}
		for i, item := range list {
			unknownKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Map:
		m, ok := v.(map[string]interface{})
		if !ok {
			return
		}
		for k, item := range m {
			unknownKeys(item, t.Elem(), join(path, k), out)
		}
	}
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func collectFields(t reflect.Type, fields map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && strings.Contains(","+opts, ",inline") || (f.Anonymous && tag == "") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, fields)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
}

var releaseNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func validate(fy *FleetYAML) error {
	if err := validateBundleName(fy.Name); err != nil {
		return err
	}
	for i, d := range fy.DependsOn {
		if d.Name == "" && d.Selector == nil {
			return fmt.Errorf("dependsOn[%d]: name or selector is required", i)
		}
		for _, s := range d.AcceptedStates {
			if _, ok := fleet.StateRank[s]; !ok {
				return fmt.Errorf("dependsOn[%d]: invalid accepted state %q", i, s)
			}
		}
	}
	switch fy.TargetCustomizationMode {
	case "", fleet.FirstMatch, fleet.AllMatches:
	default:
		return fmt.Errorf("targetCustomizationMode: must be FirstMatch or AllMatches, not %q", fy.TargetCustomizationMode)
	}
	if err := validateLabels("labels", fy.Labels); err != nil {
		return err
	}
	if err := validateOptions("", &fy.BundleDeploymentOptions); err != nil {
		return err
	}
	for i := range fy.TargetCustomizations {
		if err := validateOptions(fmt.Sprintf("targetCustomizations[%d].", i), &fy.TargetCustomizations[i].BundleDeploymentOptions); err != nil {
			return err
		}
	}
	for i := range fy.Targets {
		if err := validateOptions(fmt.Sprintf("targets[%d].", i), &fy.Targets[i].BundleDeploymentOptions); err != nil {
			return err
		}
	}
	return nil
}

// MaxBundleNameLen is the longest Bundle name a fleet.yaml may give: the
// name is the value of the bundle-name label of every BundleDeployment, and
// label values end at 63 characters.
const MaxBundleNameLen = 63

// validateBundleName checks a fleet.yaml name. As in Rancher Fleet it is the
// Bundle name as written (not made a Helm release name like the generated
// ones), so the same fleet.yaml gives the same Bundle after a move from
// Rancher; a name Rancher would pass on to the API server only to be
// refused (not a DNS-1123 subdomain), or that makes a Bundle nothing can be
// deployed from (over 63 characters), is refused here, before any chart is
// fetched or anything written. The suggestion is the generated-style form
// of the name, which is always valid.
func validateBundleName(name string) error {
	if name == "" {
		return nil
	}
	var problem string
	switch {
	case len(name) > MaxBundleNameLen:
		problem = fmt.Sprintf("it is %d characters, at most %d are allowed since the name labels every BundleDeployment", len(name), MaxBundleNameLen)
	case len(validation.IsDNS1123Subdomain(name)) > 0:
		problem = "only lower-case letters, digits, '-' and '.' are allowed, each '.'-separated part starting and ending with a letter or digit (a DNS-1123 subdomain, which the API server requires)"
	default:
		return nil
	}
	return fmt.Errorf("name %q is not a valid Bundle name (it is used as written, as in Rancher Fleet): %s; use for example %q, or remove name to get the generated one",
		name, problem, names.HelmReleaseName(name))
}

// reservedLabels are the labels by which the manager finds a Bundle's owner
// (GitRepo, HelmOp), its shard, commit and deployments. A fleet.yaml
// setting one could make another owner adopt, prune or delete the Bundle
// (a HelmOp prunes the Bundles labelled with its name), or move it to
// another shard, so fleet.yaml labels never set them; the reader's callers
// set the ones that apply.
var reservedLabels = map[string]bool{
	fleet.RepoLabel:               true,
	fleet.HelmOpLabel:             true,
	fleet.CommitLabel:             true,
	fleet.ShardLabel:              true,
	fleet.BundleLabel:             true,
	fleet.BundleNamespaceLabel:    true,
	fleet.ManagedLabel:            true,
	fleet.ClusterLabel:            true,
	fleet.ClusterNamespaceLabel:   true,
	fleet.ContentNameLabel:        true,
	fleet.BundleDeploymentLabel:   true,
	fleet.BundleInternalSecretLbl: true,
	fleet.CreatedByUserIDLabel:    true,
}

// stripInternal clears the options only the manager may set, so a fleet.yaml
// cannot loosen (or fake) a GitRepoRestriction: allowedTargetNamespaceSelector
// is copied from the namespace's restrictions onto every BundleDeployment.
// It also clears contentsId, which would make the bundle deploy a stored
// Content named by id (another bundle's, possibly another tenant's) instead
// of the repository's files, and valuesHash, which describes values the
// manager keeps in a Secret: a bundle read from a repository is its files.
func stripInternal(fy *FleetYAML, warnings *[]string) {
	for k := range fy.Labels {
		if reservedLabels[k] {
			delete(fy.Labels, k)
			*warnings = append(*warnings, fmt.Sprintf("label %q is internal (it names the Bundle's owner or its deployments) and was ignored", k))
		}
	}
	if fy.ContentsID != "" {
		fy.ContentsID = ""
		*warnings = append(*warnings, `key "contentsId" is internal (the bundle deploys the repository's files) and was ignored`)
	}
	if fy.ValuesHash != "" {
		fy.ValuesHash = ""
		*warnings = append(*warnings, `key "valuesHash" is internal (set by the manager) and was ignored`)
	}
	strip := func(prefix string, o *fleet.BundleDeploymentOptions) {
		if o.AllowedTargetNamespaceSelector != nil {
			o.AllowedTargetNamespaceSelector = nil
			*warnings = append(*warnings, fmt.Sprintf("key %q is internal (set from GitRepoRestrictions) and was ignored", prefix+"allowedTargetNamespaceSelector"))
		}
	}
	strip("", &fy.BundleDeploymentOptions)
	for i := range fy.TargetCustomizations {
		strip(fmt.Sprintf("targetCustomizations[%d].", i), &fy.TargetCustomizations[i].BundleDeploymentOptions)
	}
	for i := range fy.Targets {
		strip(fmt.Sprintf("targets[%d].", i), &fy.Targets[i].BundleDeploymentOptions)
	}
}

// rootTimeoutOff stores a negative root helm.timeoutSeconds as 0. Rancher
// Fleet accepts a negative timeout anywhere: its agent waits for resources
// only with a positive one, and its options merge turns a customization's
// negative timeout into 0, switching the root's off for the clusters the
// customization matches. So a negative root timeout means no timeout,
// which 0 says without a negative value in the Bundle; a customization's
// (targetCustomizations[], targets[]) stays negative, as target.Merge
// needs it to tell "off" from "not set" (0).
func rootTimeoutOff(fy *FleetYAML) {
	if h := fy.Helm; h != nil && h.TimeoutSeconds < 0 {
		h.TimeoutSeconds = 0
	}
}

func validateOptions(prefix string, o *fleet.BundleDeploymentOptions) error {
	if o.Helm != nil {
		if rn := o.Helm.ReleaseName; rn != "" && (len(rn) > 53 || !releaseNameRE.MatchString(rn)) {
			return fmt.Errorf("%shelm.releaseName %q: must be at most 53 lower-case alphanumerics, '-' or '.'", prefix, rn)
		}
		// A negative timeoutSeconds is accepted (see rootTimeoutOff); a
		// negative maxHistory has no meaning in Rancher Fleet either.
		if o.Helm.MaxHistory < 0 {
			return fmt.Errorf("%shelm.maxHistory must not be negative", prefix)
		}
		for i, vf := range o.Helm.ValuesFrom {
			if vf.ConfigMapKeyRef == nil && vf.SecretKeyRef == nil {
				return fmt.Errorf("%shelm.valuesFrom[%d]: configMapKeyRef or secretKeyRef is required", prefix, i)
			}
		}
	}
	if err := validateLabels(prefix+"namespaceLabels", o.NamespaceLabels); err != nil {
		return err
	}
	if err := validateAnnotations(prefix+"namespaceAnnotations", o.NamespaceAnnotations); err != nil {
		return err
	}
	for i, r := range o.DownstreamResources {
		if r.Kind != "Secret" && r.Kind != "ConfigMap" {
			return fmt.Errorf("%sdownstreamResources[%d]: kind must be Secret or ConfigMap, not %q", prefix, i, r.Kind)
		}
		if r.Name == "" {
			return fmt.Errorf("%sdownstreamResources[%d]: name is required", prefix, i)
		}
	}
	return nil
}

// validateLabels refuses labels the API server would refuse on the object
// they are written to (the Bundle and its BundleDeployments for labels,
// the target namespace for namespaceLabels): caught here, the fleet.yaml is
// an input error naming its file and the key, before anything is fetched
// or written. Found only by the API server, it would fail that Bundle
// while the other bundles of the same commit are written (a partial
// apply), or fail on every cluster.
func validateLabels(field string, labels map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("%s: key %q is not a valid label key: %s", field, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(labels[k]); len(errs) > 0 {
			return fmt.Errorf("%s: the value of %q is not a valid label value: %s", field, k, strings.Join(errs, "; "))
		}
	}
	return nil
}

// maxAnnotationsSize is the API server's limit on the total size of an
// object's annotations (keys and values).
const maxAnnotationsSize = 256 * 1024

// validateAnnotations is validateLabels for annotations: keys are
// qualified names (checked in lower case, as the API server does) and
// values are free, but keys and values together are at most 256 KiB.
func validateAnnotations(field string, annotations map[string]string) error {
	var size int
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		if errs := validation.IsQualifiedName(strings.ToLower(k)); len(errs) > 0 {
			return fmt.Errorf("%s: key %q is not a valid annotation key: %s", field, k, strings.Join(errs, "; "))
		}
		size += len(k) + len(annotations[k])
	}
	if size > maxAnnotationsSize {
		return fmt.Errorf("%s: %d bytes of keys and values, at most %d are allowed", field, size, maxAnnotationsSize)
	}
	return nil
}
