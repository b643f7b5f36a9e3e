package bundlereader

// Fetching charts over the network, within the reader's budgets: the
// per-bundle download cap and the chart content charged against the
// Read's budget, repository index lookups and version constraints, HTTP
// and OCI downloads (credentials scoped to their origin, URLs redacted in
// errors) and bounded archive extraction. chart.go resolves helm.chart
// sources into bundle files with these.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v4/pkg/registry"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"

	redactpkg "github.com/fleetgo/fleet/internal/redact"
)

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

// charge counts n bytes of this bundle's chart content against the Read's
// budget (fsys.charge) and remembers them for release.
func (cf *chartFetcher) charge(n int64) error {
	cf.charged += n
	return cf.fs.charge(n)
}

// release gives the bundle's chart content back to the Read's budget once
// the bundle is built: its chart files are then garbage, and what the
// Bundle keeps of them is bounded by MaxBundleSize. The budget bounds the
// chart content held at once, so a monorepo whose bundles each install a
// chart of a few MiB reads however many bundles it has, while a single
// bundle whose charts alone exceed the budget is still refused.
//
// It also closes the idle connections of the bundle's transport: nothing
// uses that transport again, and each connection left idle would hold a
// socket and two goroutines until the idle timeout (90 s), at every sync
// of every bundle with a chart to download.
func (cf *chartFetcher) release() {
	cf.fs.readSize -= cf.charged
	cf.charged = 0
	if cf.transport != nil {
		cf.transport.CloseIdleConnections()
	}
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
//
// User information written into u is sent as basic auth, as Helm does, and
// taken out of the request's URL: the client quotes that URL in its errors
// (connection refused, DNS, TLS, timeouts) and masks a password there but
// not a token given as the user name. Credentials from credentialsFor win
// over those of the URL. Any status but 200 OK is an *HTTPStatusError, so
// that callers can tell a server failing for now (IsTemporary) from one
// refusing the name or the credentials.
func (cf *chartFetcher) get(u, origin string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(cf.ctx, http.MethodGet, u, nil)
	if err != nil {
		// The parse error quotes the URL, credentials included.
		return nil, fmt.Errorf("invalid URL %s", redact(u))
	}
	if ui := req.URL.User; ui != nil {
		pass, _ := ui.Password()
		req.SetBasicAuth(ui.Username(), pass)
		req.URL.User = nil
	}
	if user, pass, ok := cf.credentialsFor(u, origin); ok {
		req.SetBasicAuth(user, pass)
	}
	resp, err := cf.client.Do(req)
	if err != nil {
		// A redirect's target is quoted as well; it may carry user
		// information of its own.
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redact(ue.URL)
		}
		return nil, fmt.Errorf("cannot reach %s: %w", redact(u), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &HTTPStatusError{URL: redact(u), StatusCode: resp.StatusCode, Status: resp.Status}
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

// redact masks the user information of a URL (also git::<URL>) for
// messages, with the manager's one redactor (redact.URL), so that a
// password with an unencoded '/' or '#' is masked too. Every repository or
// chart URL put into an error goes through it: errors end up in statuses,
// events and logs.
func redact(u string) string { return redactpkg.URL(u) }

// redactRef is redact for an OCI reference without its oci:// scheme.
func redactRef(ref string) string {
	return strings.TrimPrefix(redact("oci://"+ref), "oci://")
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

// extractChart reads a .tgz chart with bounded readers: the total
// uncompressed size, the number of entries and each path are checked, so a
// zip bomb or a path escaping the chart is refused. charge, when set, is
// given the size of every file as it is extracted and stops the
// extraction with its error: extracted charts stay in memory until their
// bundle is built, so they count against the same budget as the
// repository's files (chartFetcher.charge).
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
