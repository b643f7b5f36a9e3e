package bundlereader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

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
// bundle is named after name (names.HelmReleaseName).
func ReadHelmOp(ctx context.Context, name string, spec *fleet.BundleSpec, opts Options) (*fleet.Bundle, error) {
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
	data, err := json.Marshal(FleetYAML{BundleSpec: *s})
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
