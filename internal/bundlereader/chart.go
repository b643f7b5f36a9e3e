package bundlereader

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/registry"
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
	// fetched maps a source key to the path it was stored under.
	fetched map[string]fetchedChart
	// downloads counts the chart sources fetched over the network for
	// this bundle, against Limits.MaxChartDownloads.
	downloads int
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
	cf.client = &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	return cf, nil
}

// credentialsFor says whether the username/password may be sent to u, a
// URL fetched for origin: the repository, registry or chart URL the
// credentials were given for (helm.repo, an oci:// or http(s) helm.chart).
// They go only to origin's scheme and host, as Helm sends them without
// --pass-credentials, so an index that points a chart download at another
// host does not receive them; with a helm repo URL regex, only when origin
// matches it. An empty origin gets none: see depOrigin.
func (cf *chartFetcher) credentialsFor(u, origin string) (string, string, bool) {
	if origin == "" || (cf.auth.Username == "" && cf.auth.Password == "") {
		return "", "", false
	}
	if cf.regex != nil && !cf.regex.MatchString(origin) {
		return "", "", false
	}
	if !sameOrigin(u, origin) {
		return "", "", false
	}
	return cf.auth.Username, cf.auth.Password, true
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

// download counts one chart source fetched over the network (a chart from
// a repository, URL, registry or git, or a dependency) and fails once a
// bundle fetches more than Limits.MaxChartDownloads: each is held in
// memory until the bundle is written, and a Chart.yaml listing hundreds
// of dependencies must not make the manager fetch them all.
func (cf *chartFetcher) download(what string) error {
	cf.downloads++
	if cf.downloads > cf.limits.MaxChartDownloads {
		return fmt.Errorf("%s: a bundle may fetch at most %d charts (dependencies and customizations included): %w", what, cf.limits.MaxChartDownloads, ErrLimit)
	}
	return nil
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
		return cf.fromGit(h, files)
	case strings.Contains(h.Chart, "::") || strings.Contains(h.Chart, "://"):
		return fmt.Errorf("helm.chart %q: unsupported chart source (use a local path, a Helm repository, oci://, an http(s) URL of a .tgz, git::<repository URL>[//<directory>][?ref=<ref>] or github.com/<owner>/<repository>[//<directory>][?ref=<ref>])", redact(h.Chart))
	default:
		// go-getter's shorthands, as in Rancher Fleet: a path that does
		// not exist in the bundle and starts with github.com/,
		// gitlab.com/ or bitbucket.org/ is a git repository.
		if g, ok := expandGitShorthand(h.Chart); ok {
			if _, err := os.Stat(filepath.Join(bundleDir, filepath.FromSlash(h.Chart))); os.IsNotExist(err) {
				h.Chart = g
				return cf.fromGit(h, files)
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
	cv, err := cf.lookup(h.Repo, h.Repo, h.Chart, h.Version)
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
	data, err := cf.downloadVersion(h.Repo, h.Repo, cv)
	if err != nil {
		return err
	}
	return cf.storeArchive(h, h.Repo, h.Chart, cv.Version, data, "", files)
}

// lookup finds the chart version matching a version or semver constraint.
// An invalid version is refused before the repository is contacted. origin
// is the credential origin (see credentialsFor).
func (cf *chartFetcher) lookup(repoURL, origin, chart, version string) (*repo.ChartVersion, error) {
	if err := CheckVersion(version); err != nil {
		return nil, err
	}
	shown := redact(repoURL)
	idxURL := strings.TrimSuffix(repoURL, "/") + "/index.yaml"
	data, err := cf.get(idxURL, origin, cf.limits.MaxIndexSize)
	if err != nil {
		return nil, fmt.Errorf("helm repository %s: %w", shown, err)
	}
	idx := &repo.IndexFile{}
	if err := yaml.Unmarshal(data, idx); err != nil {
		return nil, fmt.Errorf("helm repository %s: invalid index.yaml: %w", shown, err)
	}
	if idx.APIVersion == "" {
		return nil, fmt.Errorf("helm repository %s: index.yaml has no apiVersion (is this a Helm repository?)", shown)
	}
	for name, versions := range idx.Entries {
		kept := versions[:0]
		for _, v := range versions {
			if v != nil && v.Metadata != nil && v.Version != "" {
				kept = append(kept, v)
			}
		}
		idx.Entries[name] = kept
	}
	idx.SortEntries()
	cv, err := idx.Get(chart, version)
	if err != nil {
		if version == "" {
			return nil, fmt.Errorf("helm repository %s: chart %q not found: %w", shown, chart, err)
		}
		return nil, fmt.Errorf("helm repository %s: chart %q version %q not found: %w", shown, chart, version, err)
	}
	if len(cv.URLs) == 0 {
		return nil, fmt.Errorf("helm repository %s: chart %q %s has no download URL", shown, chart, cv.Version)
	}
	return cv, nil
}

// ErrInvalidVersion matches a chart version (helm.version, or a version of
// a chart dependency) that is neither a version nor a semver constraint: an
// input error that no retry fixes, unlike a repository failure.
var ErrInvalidVersion = errors.New("invalid chart version")

type versionError struct{ version string }

func (e *versionError) Error() string {
	return fmt.Sprintf("invalid chart version %q: not a version or a semver constraint (such as 1.2.3, ^1.2 or \">= 1.0, < 2.0\")", e.version)
}

func (e *versionError) Is(target error) bool { return target == ErrInvalidVersion }

// CheckVersion refuses what Helm cannot read as a version constraint (an
// exact version is one) with an ErrInvalidVersion; empty means the latest.
func CheckVersion(version string) error {
	if version == "" {
		return nil
	}
	if _, err := semver.NewConstraint(version); err != nil {
		return &versionError{version: version}
	}
	return nil
}

func (cf *chartFetcher) downloadVersion(repoURL, origin string, cv *repo.ChartVersion) ([]byte, error) {
	base, err := url.Parse(strings.TrimSuffix(repoURL, "/") + "/")
	if err != nil {
		// The parse error quotes the URL, credentials included.
		return nil, fmt.Errorf("invalid helm repository URL %s", redact(repoURL))
	}
	ref, err := url.Parse(cv.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("chart %s %s: invalid download URL %s", cv.Name, cv.Version, redact(cv.URLs[0]))
	}
	u := base.ResolveReference(ref)
	if u.Scheme == "oci" {
		return cf.pullOCI(u.Host+u.Path, "", cv.Version, origin)
	}
	return cf.get(u.String(), origin, cf.limits.MaxChartSize)
}

// get fetches u with a bounded body, with the credentials when
// credentialsFor(u, origin) allows them.
func (cf *chartFetcher) get(u, origin string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(cf.ctx, http.MethodGet, u, nil)
	if err != nil {
		// The parse error quotes the URL, credentials included.
		return nil, fmt.Errorf("invalid URL %s", redact(u))
	}
	if user, pass, ok := cf.credentialsFor(u, origin); ok {
		req.SetBasicAuth(user, pass)
	}
	resp, err := cf.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach %s: %w", redact(u), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("GET %s: %s (check the Helm credentials)", redact(u), resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s", redact(u), resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", redact(u), err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("GET %s: response is larger than the limit of %d bytes: %w", redact(u), limit, ErrLimit)
	}
	return data, nil
}

// sameOrigin says whether a and b have the same scheme and host (port
// included): credentials never go to another server, nor from https to
// plain http.
func sameOrigin(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Host != "" && strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Host, ub.Host)
}

// redact drops user info from a URL (also git::<URL>) for messages; an
// unparsable one loses everything of its authority up to the last "@".
// Every repository or chart URL put into an error goes through it: errors
// end up in statuses, events and logs.
func redact(u string) string {
	if rest, ok := strings.CutPrefix(u, "git::"); ok {
		return "git::" + redact(rest)
	}
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	if p, err := url.Parse(u); err == nil {
		if p.User == nil {
			return u
		}
		p.User = nil
		return p.String()
	}
	end := strings.IndexAny(rest, "?#")
	if end < 0 {
		end = len(rest)
	}
	if i := strings.LastIndex(rest[:end], "@"); i >= 0 {
		rest = rest[i+1:]
	}
	return scheme + "://" + rest
}

// redactRef is redact for an OCI reference without its oci:// scheme.
func redactRef(ref string) string {
	return strings.TrimPrefix(redact("oci://"+ref), "oci://")
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
	data, err := cf.get(h.Chart, h.Chart, cf.limits.MaxChartSize)
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
	data, err := cf.pullOCI(ref, h.Version, "", "oci://"+ref)
	if errors.Is(err, ErrInvalidVersion) {
		return fmt.Errorf("helm.version: %w", err)
	}
	if err != nil {
		return err
	}
	return cf.storeArchive(h, "oci://"+ref, "", "", data, "", files)
}

// pullOCI pulls ref at the version matching constraint, or at exact, with
// the credentials when credentialsFor allows them for origin.
func (cf *chartFetcher) pullOCI(ref, constraint, exact, origin string) ([]byte, error) {
	shown := redactRef(ref)
	if shown != ref {
		// The registry client would quote the reference, password included,
		// in its errors; it takes credentials from the options only.
		return nil, fmt.Errorf("oci://%s: credentials in the URL are not supported; give them as Helm credentials (helmSecretName)", shown)
	}
	opts := []registry.ClientOption{
		registry.ClientOptHTTPClient(cf.client),
		registry.ClientOptWriter(io.Discard),
	}
	if user, pass, ok := cf.credentialsFor("oci://"+ref, origin); ok {
		opts = append(opts, registry.ClientOptBasicAuth(user, pass))
	}
	if cf.auth.BasicHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	rc, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("oci://%s: %w", ref, err)
	}
	tag := exact
	if tag == "" {
		tag, err = cf.ociTag(rc, ref, constraint)
		if err != nil {
			return nil, err
		}
	}
	res, err := rc.Pull(ref+":"+strings.ReplaceAll(tag, "+", "_"), registry.PullOptWithChart(true))
	if err != nil {
		return nil, fmt.Errorf("cannot pull chart oci://%s:%s: %w", ref, tag, err)
	}
	if res.Chart == nil || int64(len(res.Chart.Data)) > cf.limits.MaxChartSize {
		return nil, fmt.Errorf("chart oci://%s:%s is missing or larger than the limit of %d bytes", ref, tag, cf.limits.MaxChartSize)
	}
	return res.Chart.Data, nil
}

func (cf *chartFetcher) ociTag(rc *registry.Client, ref, constraint string) (string, error) {
	if constraint != "" {
		if _, err := semver.StrictNewVersion(constraint); err == nil {
			return constraint, nil
		}
	}
	c, err := semver.NewConstraint(orStar(constraint))
	if err != nil {
		return "", &versionError{version: constraint}
	}
	tags, err := rc.Tags(ref)
	if err != nil {
		return "", fmt.Errorf("cannot list versions of oci://%s: %w", ref, err)
	}
	for _, t := range tags { // sorted newest first
		v, err := semver.NewVersion(t)
		if err == nil && c.Check(v) {
			return t, nil
		}
	}
	return "", fmt.Errorf("oci://%s: no version matches %q", ref, orStar(constraint))
}

func orStar(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

// storeArchive extracts a chart archive into the bundle's files under
// .chart/<key>/<chart name>/ and points h at it.
func (cf *chartFetcher) storeArchive(h *fleet.HelmOptions, repoURL, chart, version string, data []byte, diskPath string, files *[]file) error {
	source := redact(repoURL)
	if chart != "" {
		source += " " + chart
	}
	name, chartFiles, err := extractChart(data, cf.limits, cf.fs.charge)
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

// extractChart reads a .tgz chart with bounded readers: the total
// uncompressed size, the number of entries and each path are checked, so a
// zip bomb or a path escaping the chart is refused. charge, when set, is
// given the size of every file as it is extracted and stops the
// extraction with its error: extracted charts stay in memory until the
// bundle is written, so they count against the same per-Read budget as
// the repository's files (fsys.charge).
func extractChart(data []byte, limits Limits, charge func(int64) error) (string, []file, error) {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return "", nil, fmt.Errorf("not a gzip-compressed chart archive: %w", err)
	}
	defer gz.Close()
	limited := &countingReader{r: gz, limit: limits.MaxChartUncompressed}
	tr := tar.NewReader(limited)
	var name string
	var files []file
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if limited.exceeded {
				return "", nil, fmt.Errorf("archive expands beyond %d bytes (zip bomb?): %w", limits.MaxChartUncompressed, ErrLimit)
			}
			return "", nil, fmt.Errorf("invalid chart archive: %w", err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir, tar.TypeXGlobalHeader, tar.TypeXHeader:
			continue
		case tar.TypeReg:
		default:
			return "", nil, fmt.Errorf("archive entry %q: links and special files are not allowed in a chart", hdr.Name)
		}
		clean := path.Clean(strings.ReplaceAll(hdr.Name, `\`, "/"))
		if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return "", nil, fmt.Errorf("archive entry %q escapes the chart directory", hdr.Name)
		}
		top, rest, ok := strings.Cut(clean, "/")
		if !ok {
			return "", nil, fmt.Errorf("archive entry %q is not inside a chart directory", hdr.Name)
		}
		if name == "" {
			name = top
		} else if top != name {
			return "", nil, fmt.Errorf("archive holds more than one chart (%q and %q)", name, top)
		}
		if hdr.Size > limits.MaxFileSize {
			return "", nil, fmt.Errorf("archive entry %q is larger than the limit of %d bytes: %w", hdr.Name, limits.MaxFileSize, ErrLimit)
		}
		content, err := io.ReadAll(io.LimitReader(tr, limits.MaxFileSize+1))
		if err != nil {
			if limited.exceeded {
				return "", nil, fmt.Errorf("archive expands beyond %d bytes (zip bomb?): %w", limits.MaxChartUncompressed, ErrLimit)
			}
			return "", nil, fmt.Errorf("invalid chart archive: %w", err)
		}
		if charge != nil {
			if err := charge(int64(len(content))); err != nil {
				return "", nil, err
			}
		}
		files = append(files, file{name: rest, content: content})
		if len(files) > limits.MaxFiles {
			return "", nil, fmt.Errorf("archive has more than %d files: %w", limits.MaxFiles, ErrLimit)
		}
	}
	if !hasFile(files, "Chart.yaml") {
		return "", nil, errors.New("archive has no Chart.yaml")
	}
	return name, files, nil
}

// countingReader fails once more than limit bytes were read.
type countingReader struct {
	r        io.Reader
	n, limit int64
	exceeded bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		c.exceeded = true
		return n, fmt.Errorf("uncompressed size exceeds %d bytes: %w", c.limit, ErrLimit)
	}
	return n, err
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
		depName, depFiles, err := extractChart(data, cf.limits, cf.fs.charge)
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
