package bundlereader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/pki"
)

// chartDir is where downloaded charts are stored inside a bundle's resources.
const chartDir = ".chart"

// chartFetcher downloads Helm charts for one bundle and turns them into
// bundle files, so agents never contact a chart repository.
type chartFetcher struct {
	ctx    context.Context
	auth   HelmAuth
	regex  *regexp.Regexp
	limits Limits
	fs     *fsys
	client *http.Client
	// transport is client's, this bundle's alone (it carries the bundle's
	// TLS settings): release closes its idle connections.
	transport *http.Transport
	// fetched maps a source key to the path it was stored under.
	fetched map[string]fetchedChart
	// downloads counts the chart sources fetched over the network for
	// this bundle, against Limits.MaxChartDownloads.
	downloads int
	// charged is the chart content of this bundle counted against the
	// Read's budget (fsys.charge), which release gives back.
	charged int64
}

type fetchedChart struct {
	path    string // chart directory inside the resources
	version string
}

func newChartFetcher(ctx context.Context, auth HelmAuth, urlRegex string, limits Limits, fs *fsys) (*chartFetcher, error) {
	cf := &chartFetcher{ctx: ctx, auth: auth, limits: limits, fs: fs, fetched: map[string]fetchedChart{}}
	if urlRegex != "" {
		re, err := regexp.Compile(urlRegex)
		if err != nil {
			return nil, fmt.Errorf("invalid helm repo URL regex %q: %w", urlRegex, err)
		}
		cf.regex = re
	}
	tlsCfg, err := pki.ClientTLS(auth.CABundle, auth.InsecureSkipTLS)
	if err != nil {
		return nil, fmt.Errorf("helm %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	cf.transport = tr
	cf.client = &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	return cf, nil
}

// credentialsFor says whether the username/password may be sent to u, a
// URL fetched for origin: the repository, registry or chart URL the
// credentials were given for (helm.repo, an oci:// or http(s) helm.chart).
// They go only to origin's scheme and host, as Helm sends them without
// --pass-credentials, so an index that points a chart download at another
// host does not receive them. An empty origin gets none: the callers pass
// authOrigin's (or depOrigin's), which is empty when the helm repo URL
// regex does not allow the credentials.
func (cf *chartFetcher) credentialsFor(u, origin string) (string, string, bool) {
	if origin == "" || (cf.auth.Username == "" && cf.auth.Password == "") {
		return "", "", false
	}
	if !sameOrigin(u, origin) {
		return "", "", false
	}
	return cf.auth.Username, cf.auth.Password, true
}

// regexAllows says whether the helm repo URL regex (if any) lets the
// credentials go to the chart of h fetched from origin. As in Rancher
// Fleet (shouldAddAuthToRequest), the regex is matched against helm.repo
// as written when it is set, else against helm.chart as written: the
// registry path of an oci:// repo without the chart name, and a git::
// source with its prefix, directory and ref, so that a regex written for
// Rancher gives the credentials it gives there. It is also matched
// against origin, the URL actually fetched (the oci:// reference with the
// chart's name, a git:: source's repository URL), as this project did
// before: a regex written for that keeps working. Either way the regex
// approves the very server the credentials go to.
func (cf *chartFetcher) regexAllows(h *fleet.HelmOptions, origin string) bool {
	switch {
	case cf.regex == nil:
		return true
	case origin != "" && cf.regex.MatchString(origin):
		return true
	case h.Repo != "":
		return cf.regex.MatchString(h.Repo)
	}
	return cf.regex.MatchString(h.Chart)
}

// authOrigin is the credential origin (see credentialsFor) of the chart
// of h fetched from origin: empty when the helm repo URL regex does not
// allow credentials for it.
func (cf *chartFetcher) authOrigin(h *fleet.HelmOptions, origin string) string {
	if !cf.regexAllows(h, origin) {
		return ""
	}
	return origin
}

// depOrigin is the credential origin of a chart dependency's repository:
// none, unless the helm repo URL regex is set and names that repository.
// A chart's Chart.yaml is the repository author's, not the credentials
// owner's: a private chart depending on https://charts.example.com must
// not hand that host the private repository's password. Rancher Fleet
// updates dependencies with Helm's downloader and no credentials at all;
// the regex is the explicit way to let a dependency in a private
// repository have them.
func (cf *chartFetcher) depOrigin(repository string) string {
	if cf.regex != nil && cf.regex.MatchString(repository) {
		return repository
	}
	return ""
}

// resolve makes h point at a chart inside the bundle's files, downloading it
// first when it lives in a repository. files is extended with the chart's
// files. bundleDir is the bundle directory on disk (for local charts).
func (cf *chartFetcher) resolve(h *fleet.HelmOptions, bundleDir string, files *[]file) error {
	switch {
	case h.Chart == "" && h.Repo == "":
		return nil
	case strings.HasPrefix(h.Repo, "oci://") && h.Chart != "":
		return cf.fromOCI(h, strings.TrimSuffix(h.Repo, "/")+"/"+h.Chart, files)
	case h.Chart == "":
		return fmt.Errorf("helm.repo %q is set but helm.chart is empty: name the chart to install", redact(h.Repo))
	case h.Repo != "":
		return cf.fromRepo(h, files)
	case strings.HasPrefix(h.Chart, "oci://"):
		return cf.fromOCI(h, h.Chart, files)
	case strings.HasPrefix(h.Chart, "http://") || strings.HasPrefix(h.Chart, "https://"):
		return cf.fromURL(h, files)
	case strings.HasPrefix(h.Chart, "git::"):
		return cf.fromGit(h, cf.regexAllows(h, ""), files)
	case strings.Contains(h.Chart, "::") || strings.Contains(h.Chart, "://"):
		return fmt.Errorf("helm.chart %q: unsupported chart source (use a local path, a Helm repository, oci://, an http(s) URL of a .tgz, git::<repository URL>[//<directory>][?ref=<ref>] or github.com/<owner>/<repository>[//<directory>][?ref=<ref>])", redact(h.Chart))
	default:
		// go-getter's shorthands, as in Rancher Fleet: a path that does
		// not exist in the bundle and starts with github.com/,
		// gitlab.com/ or bitbucket.org/ is a git repository.
		if g, ok := expandGitShorthand(h.Chart); ok {
			if _, err := os.Stat(filepath.Join(bundleDir, filepath.FromSlash(h.Chart))); os.IsNotExist(err) {
				allowed := cf.regexAllows(h, "") // as written, as in Rancher Fleet
				h.Chart = g
				return cf.fromGit(h, allowed, files)
			}
		}
		return cf.fromLocal(h, bundleDir, files)
	}
}

func sourceKey(parts ...string) string {
	d := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(d[:])[:12]
}

func (cf *chartFetcher) fromLocal(h *fleet.HelmOptions, bundleDir string, files *[]file) error {
	if filepath.IsAbs(h.Chart) {
		return fmt.Errorf("helm.chart %q: an absolute path is not allowed; use a path relative to the bundle", h.Chart)
	}
	rel := path.Clean(filepath.ToSlash(h.Chart))
	abs := filepath.Join(bundleDir, filepath.FromSlash(rel))
	if !cf.fs.inside(abs) {
		return fmt.Errorf("helm.chart %q points outside the repository", h.Chart)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("helm.chart %q not found: %w", h.Chart, err)
	}
	if _, err := cf.fs.resolve(abs); err != nil {
		return fmt.Errorf("helm.chart %q: %w", h.Chart, err)
	}
	if !st.IsDir() {
		// A packaged chart in the repository.
		data, err := cf.fs.readFile(abs)
		if err != nil {
			return err
		}
		return cf.storeArchive(h, "file", cf.fs.rel(abs), "", data, "", files)
	}
	insideBundle := rel != ".." && !strings.HasPrefix(rel, "../")
	if insideBundle {
		prefix := rel
		if !hasFile(*files, path.Join(prefix, "Chart.yaml")) {
			return fmt.Errorf("helm.chart %q: no Chart.yaml in that directory (is it excluded by .fleetignore?)", h.Chart)
		}
		h.Chart = prefix
		return cf.dependencies(h, prefix, abs, files)
	}
	// A chart elsewhere in the repository: copy its files into the bundle.
	chartFiles, err := cf.fs.loadDir(abs)
	if err != nil {
		return err
	}
	if !hasFile(chartFiles, "Chart.yaml") {
		return fmt.Errorf("helm.chart %q: no Chart.yaml in that directory", h.Chart)
	}
	name := path.Base(rel)
	prefix := path.Join(chartDir, sourceKey("file", cf.fs.rel(abs), ""), name)
	for _, f := range chartFiles {
		*files = append(*files, file{name: path.Join(prefix, f.name), content: f.content})
	}
	h.Chart = prefix
	return cf.dependencies(h, prefix, abs, files)
}

func hasFile(files []file, name string) bool {
	for _, f := range files {
		if f.name == name {
			return true
		}
	}
	return false
}

func fileContent(files []file, name string) []byte {
	for _, f := range files {
		if f.name == name {
			return f.content
		}
	}
	return nil
}

// fromRepo resolves chart+version in an HTTP(S) repository's index.
func (cf *chartFetcher) fromRepo(h *fleet.HelmOptions, files *[]file) error {
	if err := cf.download("chart " + redact(h.Repo) + " " + h.Chart); err != nil {
		return err
	}
	origin := cf.authOrigin(h, h.Repo)
	cv, err := cf.lookup(h.Repo, origin, h.Chart, h.Version)
	if errors.Is(err, ErrInvalidVersion) {
		return fmt.Errorf("helm.version: %w", err)
	}
	if err != nil {
		return err
	}
	key := sourceKey(h.Repo, h.Chart, cv.Version)
	if done, ok := cf.fetched[key]; ok {
		h.Chart, h.Version, h.Repo = done.path, done.version, ""
		return nil
	}
	data, err := cf.downloadVersion(h.Repo, origin, cv)
	if err != nil {
		return err
	}
	return cf.storeArchive(h, h.Repo, h.Chart, cv.Version, data, "", files)
}

func (cf *chartFetcher) fromURL(h *fleet.HelmOptions, files *[]file) error {
	key := sourceKey(h.Chart, "", "")
	if done, ok := cf.fetched[key]; ok {
		h.Chart, h.Version = done.path, done.version
		return nil
	}
	if err := cf.download("helm.chart " + redact(h.Chart)); err != nil {
		return err
	}
	data, err := cf.get(h.Chart, cf.authOrigin(h, h.Chart), cf.limits.MaxChartSize)
	if err != nil {
		return fmt.Errorf("helm.chart: %w", err)
	}
	return cf.storeArchive(h, h.Chart, "", "", data, "", files)
}

func (cf *chartFetcher) fromOCI(h *fleet.HelmOptions, ref string, files *[]file) error {
	ref = strings.TrimPrefix(ref, "oci://")
	if err := cf.download("chart oci://" + redactRef(ref)); err != nil {
		return err
	}
	data, err := cf.pullOCI(ref, h.Version, "", cf.authOrigin(h, "oci://"+ref))
	if errors.Is(err, ErrInvalidVersion) {
		return fmt.Errorf("helm.version: %w", err)
	}
	if err != nil {
		return err
	}
	return cf.storeArchive(h, "oci://"+ref, "", "", data, "", files)
}

// storeArchive extracts a chart archive into the bundle's files under
// .chart/<key>/<chart name>/ and points h at it.
func (cf *chartFetcher) storeArchive(h *fleet.HelmOptions, repoURL, chart, version string, data []byte, diskPath string, files *[]file) error {
	source := redact(repoURL)
	if chart != "" {
		source += " " + chart
	}
	name, chartFiles, err := extractChart(data, cf.limits, cf.charge)
	if err != nil {
		return fmt.Errorf("chart %s: %w", source, err)
	}
	meta := &chartv2.Metadata{}
	if err := yaml.Unmarshal(fileContent(chartFiles, "Chart.yaml"), meta); err != nil {
		return fmt.Errorf("chart %s: invalid Chart.yaml: %w", source, err)
	}
	if version == "" {
		version = meta.Version
	}
	key := sourceKey(repoURL, chart, version)
	prefix := path.Join(chartDir, key, name)
	if done, ok := cf.fetched[key]; ok {
		h.Chart, h.Version, h.Repo = done.path, done.version, ""
		return nil
	}
	for _, f := range chartFiles {
		*files = append(*files, file{name: path.Join(prefix, f.name), content: f.content})
	}
	cf.fetched[key] = fetchedChart{path: prefix, version: version}
	h.Chart, h.Version, h.Repo = prefix, version, ""
	return cf.dependencies(h, prefix, diskPath, files)
}

// dependencies downloads the chart's dependencies that are not vendored in
// charts/, unless helm.disableDependencyUpdate is set.
func (cf *chartFetcher) dependencies(h *fleet.HelmOptions, prefix, diskDir string, files *[]file) error {
	if h.DisableDependencyUpdate {
		return nil
	}
	meta := &chartv2.Metadata{}
	if err := yaml.Unmarshal(fileContent(*files, path.Join(prefix, "Chart.yaml")), meta); err != nil {
		return fmt.Errorf("chart %s: invalid Chart.yaml: %w", prefix, err)
	}
	for _, dep := range meta.Dependencies {
		if dep == nil || dep.Repository == "" || vendored(*files, prefix, dep.Name) {
			continue
		}
		var data []byte
		var err error
		switch {
		case strings.HasPrefix(dep.Repository, "file://"):
			if diskDir == "" {
				return fmt.Errorf("chart %s: dependency %q uses %s but the chart was downloaded without it", prefix, dep.Name, redact(dep.Repository))
			}
			depDir := filepath.Join(diskDir, filepath.FromSlash(strings.TrimPrefix(dep.Repository, "file://")))
			if !cf.fs.inside(depDir) {
				return fmt.Errorf("chart %s: dependency %q points outside the repository", prefix, dep.Name)
			}
			depFiles, err := cf.fs.loadDir(depDir)
			if err != nil {
				return fmt.Errorf("chart %s: dependency %q: %w", prefix, dep.Name, err)
			}
			for _, f := range depFiles {
				*files = append(*files, file{name: path.Join(prefix, "charts", dep.Name, f.name), content: f.content})
			}
			continue
		case strings.HasPrefix(dep.Repository, "oci://"):
			ref := strings.TrimSuffix(strings.TrimPrefix(dep.Repository, "oci://"), "/") + "/" + dep.Name
			if err = cf.download("oci://" + redactRef(ref)); err == nil {
				data, err = cf.pullOCI(ref, dep.Version, "", cf.depOrigin(dep.Repository))
			}
		case strings.HasPrefix(dep.Repository, "http://") || strings.HasPrefix(dep.Repository, "https://"):
			origin := cf.depOrigin(dep.Repository)
			var cv *repo.ChartVersion
			if err = cf.download(redact(dep.Repository) + " " + dep.Name); err == nil {
				cv, err = cf.lookup(dep.Repository, origin, dep.Name, dep.Version)
			}
			if err == nil {
				data, err = cf.downloadVersion(dep.Repository, origin, cv)
			}
		default:
			return fmt.Errorf("chart %s: dependency %q: repository %q is not supported (use http(s)://, oci:// or file://)", prefix, dep.Name, redact(dep.Repository))
		}
		if err != nil {
			return fmt.Errorf("chart %s: dependency %q: %w", prefix, dep.Name, err)
		}
		depName, depFiles, err := extractChart(data, cf.limits, cf.charge)
		if err != nil {
			return fmt.Errorf("chart %s: dependency %q: %w", prefix, dep.Name, err)
		}
		for _, f := range depFiles {
			*files = append(*files, file{name: path.Join(prefix, "charts", depName, f.name), content: f.content})
		}
	}
	return nil
}

func vendored(files []file, prefix, name string) bool {
	dir := path.Join(prefix, "charts") + "/"
	for _, f := range files {
		if !strings.HasPrefix(f.name, dir) {
			continue
		}
		rest := strings.TrimPrefix(f.name, dir)
		if strings.HasPrefix(rest, name+"/") || (strings.HasPrefix(rest, name+"-") && strings.HasSuffix(rest, ".tgz")) {
			return true
		}
	}
	return false
}
