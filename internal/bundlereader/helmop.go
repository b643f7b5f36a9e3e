package bundlereader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// ReadHelmOp builds the Bundle of a HelmOp: spec is a Bundle spec whose
// helm options name a chart in a repository (helm.repo and helm.chart, an
// oci:// chart, an http(s) URL of a .tgz, a git:: source or a github.com/,
// gitlab.com/ or bitbucket.org/ shorthand, always read from git since a
// HelmOp has no directory of its own). The chart is
// downloaded and stored as the bundle's resources exactly as for a
// fleet.yaml, so agents never need to reach the repository, and
// spec.helm.version of the result is the version that was resolved. The
// bundle is named name exactly, the HelmOp's name, as Rancher Fleet names
// it, so that dependsOn finds it by that name and a HelmOp moved from
// Rancher keeps its Bundle; CheckHelmOpName says which names can be.
func ReadHelmOp(ctx context.Context, name string, spec *fleet.BundleSpec, opts Options) (*fleet.Bundle, error) {
	if err := CheckHelmOpName(name); err != nil {
		return nil, err
	}
	h := spec.Helm
	if h == nil || h.Chart == "" {
		return nil, specError("spec.helm.chart is required: name the chart to deploy")
	}
	if h.Repo == "" && !remoteChart(h.Chart) {
		return nil, specError(fmt.Sprintf("spec.helm.chart %q: a HelmOp needs a chart from a repository, not a local path: "+
			"set spec.helm.repo (a Helm repository or oci:// registry) with the chart's name, or give spec.helm.chart as an oci:// chart, "+
			"an http(s):// URL of a .tgz, a git::<repository URL>[//<directory>][?ref=<ref>] source, "+
			"or a github.com/, gitlab.com/ or bitbucket.org/<owner>/<repository>[//<directory>][?ref=<ref>] shorthand", redact(h.Chart)))
	}
	if len(h.ValuesFiles) > 0 {
		return nil, specError("spec.helm.valuesFiles: a HelmOp has no files to read values from; use spec.helm.values or valuesFrom")
	}
	s := spec.DeepCopy()
	s.Resources, s.ContentsID, s.ValuesHash = nil, "", ""
	data, err := json.Marshal(FleetYAML{Name: name, BundleSpec: *s})
	if err != nil {
		return nil, err
	}
	// An empty root: there is nothing to read but the chart.
	dir, err := os.MkdirTemp("", "fleet-helmop-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	// readBundle takes restrictions from the options (a GitRepo's targets),
	// never from a fleet.yaml; a HelmOp's own are in its spec.
	opts.TargetRestrictions = append(append([]fleet.BundleTargetRestriction(nil), opts.TargetRestrictions...), s.TargetRestrictions...)
	opts.Limits = opts.Limits.withDefaults()
	fs, err := newFS(dir, opts.Limits)
	if err != nil {
		return nil, err
	}
	b, err := readBundle(ctx, bundleInput{name: name, fs: fs, dir: fs.root, fleetYAML: data, opts: &opts})
	if errors.Is(err, ErrInvalidVersion) {
		// spec.helm.version (or a version the chart's dependencies name)
		// has to change: no retry helps.
		return nil, invalidSpec{err}
	}
	return b, err
}

// CheckHelmOpName refuses a HelmOp name its Bundle cannot have, before
// anything is fetched or written. The API server lets a HelmOp's name be
// any DNS-1123 subdomain of up to 253 characters, but the Bundle's name is
// the value of label fleet.cattle.io/bundle-name on every
// BundleDeployment, and the HelmOp's name that of
// fleet.cattle.io/fleet-helm-name on the Bundle: a label value holds at
// most 63 characters. (Rancher Fleet sends such a Bundle to the API
// server, which refuses it, and retries forever.)
func CheckHelmOpName(name string) error {
	var problem string
	switch {
	case len(validation.IsDNS1123Subdomain(name)) > 0:
		problem = "it is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.'), which the API server requires of a Bundle name"
	case len(name) > MaxBundleNameLen:
		problem = fmt.Sprintf("it is %d characters long, at most %d are allowed: the Bundle is named after the HelmOp, "+
			"and that name is the value of labels %s and %s, which hold at most %d characters",
			len(name), MaxBundleNameLen, fleet.HelmOpLabel, fleet.BundleLabel, MaxBundleNameLen)
	default:
		return nil
	}
	return specError(fmt.Sprintf("HelmOp name %q cannot name its Bundle: %s. "+
		"Nothing is deployed: create the HelmOp again under a shorter name and delete this one", name, problem))
}

// ErrInvalidSpec matches the errors of ReadHelmOp that no retry can fix:
// the spec itself has to change.
var ErrInvalidSpec = errors.New("invalid HelmOp spec")

type specError string

func (e specError) Error() string        { return string(e) }
func (e specError) Is(target error) bool { return target == ErrInvalidSpec }

// invalidSpec marks err as one of ErrInvalidSpec, keeping what it matches.
type invalidSpec struct{ err error }

func (e invalidSpec) Error() string        { return e.err.Error() }
func (e invalidSpec) Unwrap() error        { return e.err }
func (e invalidSpec) Is(target error) bool { return target == ErrInvalidSpec }

// remoteChart reports whether chart, without helm.repo, names a chart
// outside the (empty) bundle directory: a URL, a git:: source or a
// shorthand, which resolve reads from git since no directory of the
// HelmOp can have its path.
func remoteChart(chart string) bool {
	if _, ok := expandGitShorthand(chart); ok {
		return true
	}
	for _, p := range []string{"oci://", "http://", "https://", "git::"} {
		if strings.HasPrefix(chart, p) {
			return true
		}
	}
	return false
}
