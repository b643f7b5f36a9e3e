package bundlereader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// HelmAuth are the credentials and TLS settings for chart repositories.
type HelmAuth struct {
	Username, Password string
	CABundle           []byte
	InsecureSkipTLS    bool
	// BasicHTTP talks plain HTTP to OCI registries.
	BasicHTTP bool
	// SSHPrivateKey (PEM) authenticates to git:: chart sources reached
	// over SSH (ssh:// or user@host:path); it is never sent elsewhere.
	SSHPrivateKey []byte
	// SSHKnownHosts (known_hosts lines) verifies the host keys of those
	// sources: there is no trust on first use, as for GitRepo clones. A
	// per-path entry without it inherits Options.Auth's, since it names
	// servers rather than credentials.
	SSHKnownHosts []byte
}

// HelmAuthFromSecret reads chart repository credentials from the data of a
// Secret with Fleet's keys: username, password, cacerts (PEM),
// insecureSkipVerify and basicHTTP ("true" or "false"), ssh-privatekey
// (PEM) and known_hosts.
func HelmAuthFromSecret(data map[string][]byte) HelmAuth {
	a := HelmAuth{
		Username:      string(data["username"]),
		Password:      string(data["password"]),
		CABundle:      data["cacerts"],
		SSHPrivateKey: data["ssh-privatekey"],
		SSHKnownHosts: data["known_hosts"],
	}
	a.InsecureSkipTLS, _ = strconv.ParseBool(string(data["insecureSkipVerify"]))
	a.BasicHTTP, _ = strconv.ParseBool(string(data["basicHTTP"]))
	return a
}

// Limits bound what a repository may make the reader do. Zero fields take
// the defaults of DefaultLimits.
type Limits struct {
	// MaxFileSize is the largest single file (also inside chart archives).
	MaxFileSize int64
	// MaxFiles is the most files of one bundle (or one chart archive).
	MaxFiles int
	// MaxTotalSize bounds the bytes one Read holds: all files it reads
	// from the repository, plus the files of the charts it downloads and
	// extracts for the bundle being built (a built bundle's charts no
	// longer count).
	MaxTotalSize int64
	// MaxBundleSize is the largest serialized Bundle; the API server refuses
	// objects above ~3 MiB.
	MaxBundleSize int64
	// CompressThreshold is the serialized size from which resources are
	// stored base64+gz.
	CompressThreshold int64
	// MaxChartSize bounds a downloaded chart archive.
	MaxChartSize int64
	// MaxChartUncompressed bounds what a chart archive may expand to.
	MaxChartUncompressed int64
	// MaxIndexSize bounds a repository's index.yaml.
	MaxIndexSize int64
	// MaxChartDownloads bounds the charts one bundle fetches over the
	// network: helm.chart sources of the bundle and its customizations,
	// and their dependencies missing from charts/.
	MaxChartDownloads int
}

// DefaultLimits are used for every zero field of Limits.
var DefaultLimits = Limits{
	MaxFileSize:          10 << 20,
	MaxFiles:             10000,
	MaxTotalSize:         512 << 20,
	MaxBundleSize:        3 << 20,
	CompressThreshold:    1000000,
	MaxChartSize:         20 << 20,
	MaxChartUncompressed: 64 << 20,
	MaxIndexSize:         64 << 20,
	MaxChartDownloads:    100,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	override(&d.MaxFileSize, l.MaxFileSize)
	override(&d.MaxFiles, l.MaxFiles)
	override(&d.MaxTotalSize, l.MaxTotalSize)
	override(&d.MaxBundleSize, l.MaxBundleSize)
	override(&d.CompressThreshold, l.CompressThreshold)
	override(&d.MaxChartSize, l.MaxChartSize)
	override(&d.MaxChartUncompressed, l.MaxChartUncompressed)
	override(&d.MaxIndexSize, l.MaxIndexSize)
	override(&d.MaxChartDownloads, l.MaxChartDownloads)
	return d
}

// override sets *dst to v when v is set (positive); zero keeps the default.
func override[T int | int64](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// Options configure Read.
type Options struct {
	// Namespace of the produced Bundles.
	Namespace string
	// Labels are added to every Bundle (e.g. repo-name, commit).
	Labels map[string]string
	// Targets and TargetRestrictions come from the GitRepo or --targets-file
	// and are appended after the fleet.yaml ones (unless overrideTargets).
	Targets            []fleet.BundleTarget
	TargetRestrictions []fleet.BundleTargetRestriction
	// ServiceAccount and TargetNamespace override fleet.yaml when set.
	ServiceAccount, TargetNamespace string
	// Paused, KeepResources and DeleteNamespace are set on every bundle when
	// true.
	Paused, KeepResources, DeleteNamespace bool
	// CorrectDrift overrides fleet.yaml when set.
	CorrectDrift *fleet.CorrectDrift
	// SyncGeneration is the Bundle's forceSyncGeneration, 0 included: as in
	// Rancher Fleet it always replaces fleet.yaml's.
	SyncGeneration int64
	// Auth is used for chart downloads; AuthByPath overrides it per bundle
	// path (relative to root). HelmRepoURLRegex restricts which repository
	// URLs receive the username and password of either, as Rancher Fleet's
	// fleet apply does with --helm-credentials-by-path-file; a GitRepo
	// with helmSecretNameForPaths leaves it empty (readerOptions in
	// internal/gitops/controller), as Rancher Fleet's gitjob does.
	Auth             HelmAuth
	AuthByPath       map[string]HelmAuth
	HelmRepoURLRegex string
	Limits           Limits
	// FleetYAML, when set, replaces the fleet.yaml of the first path (for
	// `fleet apply -f`).
	FleetYAML []byte
	// Warn receives non-fatal problems such as unknown fleet.yaml keys.
	Warn func(msg string)
}

// Read walks root/paths (globs allowed; default ".") and returns one Bundle
// per bundle directory, named NAME-<path> via names.HelmReleaseName (or
// fleet.yaml's name as written) and sorted by name. A path that does not
// exist, names a file, or holds nothing to deploy (no fleet.yaml nor YAML,
// or only bundles without resources), and a glob that matches no
// directory, fail the read (Rancher Fleet skips them, and so prunes their
// bundles). A directory a glob matches that holds no fleet.yaml nor YAML,
// and a bundle without resources (a fleet.yaml alone, as Rancher Fleet
// skips it) are skipped with a warning (Options.Warn), and the read fails
// when nothing yields a bundle: an empty result would make the caller
// prune every bundle. Any error fails the whole read, so a caller never
// applies a partial set of bundles (which would prune the rest).
func Read(ctx context.Context, name, root string, paths []string, opts Options) ([]*fleet.Bundle, error) {
	opts.Limits = opts.Limits.withDefaults()
	fs, err := newFS(root, opts.Limits)
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	scan, err := scanPaths(fs, paths, opts.FleetYAML)
	if err != nil {
		return nil, err
	}
	bundles := make([]*fleet.Bundle, 0, len(scan.dirs))
	byName := map[string]string{}
	built := map[string]bool{} // the directories that yielded a bundle
	for _, d := range scan.dirs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var override []byte
		if d == scan.firstDir {
			override = opts.FleetYAML
		}
		b, err := readBundle(ctx, bundleInput{name: name, fs: fs, dir: d, fleetYAML: override, opts: &opts})
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", displayPath(fs.rel(d)), err)
		}
		if len(b.Spec.Resources) == 0 {
			// As in Rancher Fleet (ErrNoResources): no Bundle, and its
			// name is not taken.
			scan.skipped = append(scan.skipped, fmt.Sprintf("bundle %s: no resources to deploy", displayPath(fs.rel(d))))
			continue
		}
		if other, dup := byName[b.Name]; dup {
			return nil, fmt.Errorf("paths %s and %s both produce bundle %q; set a distinct name in fleet.yaml", other, displayPath(fs.rel(d)), b.Name)
		}
		byName[b.Name] = displayPath(fs.rel(d))
		built[d] = true
		bundles = append(bundles, b)
	}
	if err := scan.emptyLiteral(fs, built); err != nil {
		return nil, err
	}
	if len(bundles) == 0 {
		return nil, noBundleError(paths, scan.skipped)
	}
	if opts.Warn != nil {
		for _, s := range scan.skipped {
			opts.Warn(s + "; skipped")
		}
	}
	sort.Slice(bundles, func(i, j int) bool { return bundles[i].Name < bundles[j].Name })
	return bundles, nil
}

func displayPath(rel string) string {
	if rel == "." || rel == "" {
		return "(root)"
	}
	return rel
}

type bundleInput struct {
	name      string
	fs        *fsys
	dir       string
	fleetYAML []byte
	// options is the driven scan's options file, relative to dir and "/"
	// separated; empty means dir's fleet.yaml, if any. exclude holds it and
	// every other options file the scan names for dir: none is a resource.
	options string
	exclude map[string]bool
	opts    *Options
}

// readBundle builds the Bundle of one directory.
func readBundle(ctx context.Context, in bundleInput) (*fleet.Bundle, error) {
	rel := in.fs.rel(in.dir)
	data := in.fleetYAML
	yamlName := "fleet.yaml"
	switch {
	case data != nil:
	case in.options != "":
		yamlName = in.options
		var err error
		if data, err = in.fs.readFile(filepath.Join(in.dir, filepath.FromSlash(in.options))); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("options file %s does not exist", path.Join(rel, in.options))
			}
			return nil, err
		}
	default:
		if p := fleetYAMLPath(in.dir); p != "" {
			yamlName = filepath.Base(p)
			var err error
			if data, err = in.fs.readFile(p); err != nil {
				return nil, err
			}
		}
	}
	// Warnings name the bundle by its options file.
	warn := func(warnings []string) {
		for _, w := range warnings {
			if in.opts.Warn != nil {
				in.opts.Warn(fmt.Sprintf("%s: %s", path.Join(rel, yamlName), w))
			}
		}
	}
	fy, warnings, err := ParseFleetYAML(data)
	warn(warnings)
	if err != nil {
		return nil, &ParseError{Path: path.Join(rel, yamlName), Err: err}
	}
	files, err := in.fs.loadBundleDir(in.dir, in.exclude)
	if err != nil {
		return nil, err
	}
	spec := fy.BundleSpec.DeepCopy()
	// Only the reader and the manager set these; ParseFleetYAML already
	// dropped them, this keeps every caller safe.
	spec.Resources, spec.ContentsID, spec.ValuesHash = nil, "", ""
	targets := append([]fleet.BundleTarget{}, spec.Targets...)
	for _, t := range fy.TargetCustomizations {
		targets = append(targets, *t.DeepCopy())
	}
	var orig fleet.HelmOptions
	if fy.Helm != nil {
		orig = *fy.Helm
	}

	// Helm: values files, chart properties propagation, downloads. Values
	// files become helm.values and, as in Rancher Fleet, are no resources.
	valuesFiles := map[string]bool{}
	if err := mergeValuesFiles(in.fs, in.dir, "", spec.Helm, valuesFiles); err != nil {
		return nil, err
	}
	for i := range targets {
		if err := mergeValuesFiles(in.fs, in.dir, fmt.Sprintf("targetCustomizations[%d].", i), targets[i].Helm, valuesFiles); err != nil {
			return nil, err
		}
	}
	if (spec.Helm == nil || (spec.Helm.Chart == "" && spec.Helm.Repo == "")) && hasFile(files, "Chart.yaml") {
		if spec.Helm == nil {
			spec.Helm = &fleet.HelmOptions{}
		}
		spec.Helm.Chart = "."
	}
	propagateHelm(spec.Helm, targets)
	auth := in.opts.Auth
	if a, ok, err := authForPath(in.opts.AuthByPath, rel); err != nil {
		return nil, err
	} else if ok {
		if len(a.SSHKnownHosts) == 0 {
			a.SSHKnownHosts = auth.SSHKnownHosts
		}
		auth = a
	}
	cf, err := newChartFetcher(ctx, auth, in.opts.HelmRepoURLRegex, in.opts.Limits, in.fs)
	if err != nil {
		return nil, err
	}
	defer cf.release()
	if spec.Helm != nil {
		if err := cf.resolve(spec.Helm, in.dir, &files); err != nil {
			return nil, err
		}
	}
	for i := range targets {
		if h := targets[i].Helm; h != nil && (h.Chart != "" || h.Repo != "") {
			if spec.Helm != nil && h.Chart == orig.Chart && h.Repo == orig.Repo && h.Version == orig.Version {
				h.Chart, h.Repo, h.Version = spec.Helm.Chart, spec.Helm.Repo, spec.Helm.Version
				continue
			}
			if err := cf.resolve(h, in.dir, &files); err != nil {
				return nil, fmt.Errorf("%s: %w", targetLabel(i, targets[i]), err)
			}
		}
	}
	warn(kustomizeWarnings(files, spec.BundleDeploymentOptions, targets))
	warn(overlayWarnings(files, spec.BundleDeploymentOptions, targets))

	applyOptions(spec, in.opts)
	spec.Targets, spec.TargetRestrictions = assembleTargets(targets, fy.OverrideTargets, in.opts)
	if ns := in.opts.TargetNamespace; ns != "" {
		// The GitRepo's targetNamespace (fleet apply --target-namespace)
		// forces every resource into one namespace: as in Rancher Fleet it
		// is written into every target too, so no customization's
		// namespace (nor "-") overrides it.
		for i := range spec.Targets {
			spec.Targets[i].TargetNamespace = ns
		}
	}
	if len(valuesFiles) > 0 {
		kept := files[:0]
		for _, f := range files {
			if !valuesFiles[f.name] {
				kept = append(kept, f)
			}
		}
		files = kept
	}
	resources, err := toResources(files)
	if err != nil {
		return nil, err
	}
	spec.Resources = resources

	// As in Rancher Fleet: fleet.yaml's name as written (ParseFleetYAML
	// refused one that cannot be a Bundle name), else the GitRepo name
	// joined with the path (and options file) made a Helm release name.
	bundleName := fy.Name
	if bundleName == "" {
		id := in.name
		if rel != "." {
			id = path.Join(in.name, rel)
		}
		if in.options != "" {
			id = path.Join(id, strings.TrimSuffix(in.options, path.Ext(in.options)))
		}
		bundleName = names.HelmReleaseName(id)
	}
	b := &fleet.Bundle{
		TypeMeta: metav1.TypeMeta{APIVersion: fleet.GroupVersion.String(), Kind: "Bundle"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      bundleName,
			Namespace: in.opts.Namespace,
			// fleet.yaml's labels win over the GitRepo's (--label), as in
			// Rancher Fleet; the reserved ones were dropped from fy.Labels.
			Labels: mergeLabels(in.opts.Labels, fy.Labels),
		},
		Spec: *spec,
	}
	if c := in.opts.Labels[fleet.CommitLabel]; c != "" {
		b.Annotations = map[string]string{fleet.CommitAnnotation: c}
	}
	if err := fitSize(b, in.opts.Limits); err != nil {
		return nil, err
	}
	return b, nil
}

func targetLabel(i int, t fleet.BundleTarget) string {
	if t.Name != "" {
		return fmt.Sprintf("target %q", t.Name)
	}
	return fmt.Sprintf("target %d", i)
}

// jsonSize is the serialized size of the Bundle as the API server sees it.
func jsonSize(b *fleet.Bundle) (int, error) {
	data, err := json.Marshal(b)
	return len(data), err
}
