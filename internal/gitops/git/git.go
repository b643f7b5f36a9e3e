package git

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
)

// DefaultTimeout bounds one remote operation (ref lookup or fetch).
const DefaultTimeout = 30 * time.Second

// DefaultBranch is followed when neither branch nor revision is set, as in
// Fleet.
const DefaultBranch = "master"

// Remote describes one repository and how to reach it.
type Remote struct {
	URL string
	// Branch to follow; ignored when Revision is set.
	Branch string
	// Revision is a fixed commit SHA or tag name.
	Revision    string
	Credentials Credentials
	// CABundle is PEM added to the system roots for HTTPS.
	CABundle        []byte
	InsecureSkipTLS bool
	// Timeout bounds each remote call; zero means DefaultTimeout.
	Timeout time.Duration
}

func (r Remote) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultTimeout
}

func (r Remote) branch() string {
	if r.Branch == "" {
		return DefaultBranch
	}
	return r.Branch
}

var shaRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommitSHA reports whether s is a full hex commit id.
func IsCommitSHA(s string) bool { return shaRE.MatchString(s) }

// ErrRefNotFound means the branch or tag does not exist on the remote.
var ErrRefNotFound = errors.New("ref not found")

// ErrHostKey means the SSH server's key is not in known_hosts.
var ErrHostKey = errors.New("ssh host key verification failed")

// IsPermanent reports whether err is due to the input (credentials, host
// key, missing repo or ref, unsafe or oversized content) rather than a
// passing outage, so that a controller can mark the object Stalled.
func IsPermanent(err error) bool {
	for _, target := range []error{
		ErrBadCredentials, ErrRefNotFound, ErrHostKey, ErrTooLarge, ErrUnsafePath,
		transport.ErrAuthenticationRequired, transport.ErrAuthorizationFailed, transport.ErrRepositoryNotFound,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// LatestCommit returns the commit the remote's branch (or tag, or branch
// named as Revision; Revision "HEAD" is the remote's default branch) points at,
// using one ref advertisement (like `git ls-remote`) and no object transfer.
// A Revision that is already a commit SHA is returned as is.
func LatestCommit(ctx context.Context, r Remote) (string, error) {
	if IsCommitSHA(r.Revision) {
		return r.Revision, nil
	}
	auth, err := authFor(ctx, r)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	rem := gogit.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{r.URL}})
	refs, err := rem.ListContext(ctx, &gogit.ListOptions{
		Auth:            auth,
		CABundle:        r.CABundle,
		InsecureSkipTLS: r.InsecureSkipTLS,
		PeelingOption:   gogit.AppendPeeled,
		Timeout:         int(r.timeout() / time.Second),
	})
	if err != nil {
		return "", describe(ctx, err)
	}
	var want []string
	if r.Revision == "HEAD" {
		// The remote's default branch: HEAD, advertised as a symbolic ref
		// to it or as its commit.
		for _, ref := range refs {
			if ref.Name() == plumbing.HEAD {
				if ref.Type() == plumbing.SymbolicReference {
					want = []string{ref.Target().String()}
				} else {
					return ref.Hash().String(), nil
				}
			}
		}
	} else if r.Revision != "" {
		// A peeled annotated tag ("^{}") names the commit; prefer it.
		want = []string{"refs/tags/" + r.Revision + "^{}", "refs/tags/" + r.Revision, "refs/heads/" + r.Revision}
	} else {
		want = []string{"refs/heads/" + r.branch()}
	}
	byName := map[string]string{}
	for _, ref := range refs {
		if ref.Type() == plumbing.HashReference {
			byName[ref.Name().String()] = ref.Hash().String()
		}
	}
	for _, w := range want {
		if h, ok := byName[w]; ok {
			return h, nil
		}
	}
	if r.Revision != "" {
		return "", fmt.Errorf("%w: revision %q on %s", ErrRefNotFound, r.Revision, redact(r.URL))
	}
	return "", fmt.Errorf("%w: branch %q on %s", ErrRefNotFound, r.branch(), redact(r.URL))
}

// describe turns transport errors into messages a user can act on, with
// any credentials embedded in URLs masked.
func describe(ctx context.Context, err error) error {
	return &redactedError{err: explain(ctx, err)}
}

func explain(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("timed out talking to git server: %w", err)
	case errors.Is(err, transport.ErrAuthenticationRequired):
		return fmt.Errorf("authentication required: %w", err)
	case errors.Is(err, transport.ErrAuthorizationFailed):
		return fmt.Errorf("authorization failed: %w", err)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fmt.Errorf("repository not found: %w", err)
	case strings.Contains(err.Error(), "knownhosts") || strings.Contains(err.Error(), "host key"):
		return fmt.Errorf("%w: %w", ErrHostKey, err)
	}
	return err
}

var userInfoRE = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@`)

// redactedError masks "scheme://user:secret@" in its message; errors.Is and
// errors.As still see the original error.
type redactedError struct{ err error }

func (e *redactedError) Error() string {
	return userInfoRE.ReplaceAllString(e.err.Error(), "${1}***@")
}
func (e *redactedError) Unwrap() error { return e.err }

// redact drops any password from a URL before it goes into a message.
func redact(url string) string {
	if i := strings.Index(url, "://"); i >= 0 {
		rest := url[i+3:]
		if at := strings.Index(rest, "@"); at >= 0 && strings.Contains(rest[:at], ":") {
			return url[:i+3] + "***@" + rest[at+1:]
		}
	}
	return url
}

// FetchOptions bound a checkout.
type FetchOptions struct {
	// Commit is the expected commit (from LatestCommit). When the branch has
	// moved on since, the newer commit is checked out and returned.
	Commit string
	Limits Limits
}

// Fetch does a shallow fetch of the remote's branch/revision into a
// temporary bare repository under workDir and writes the commit's files to
// workDir/source, with its submodules (see writeSubmodules). It returns the
// checked-out commit. A fetch that stores more than Limits.MaxFetchBytes,
// or a checkout over Limits, is ErrTooLarge.
func Fetch(ctx context.Context, r Remote, workDir string, opts FetchOptions) (string, error) {
	limits := opts.Limits.withDefaults()
	commit, err := fetchCommit(ctx, r, filepath.Join(workDir, "repo.git"), opts.Commit, limits.MaxFetchBytes)
	if err != nil {
		return "", err
	}
	tree, err := commit.Tree()
	if err != nil {
		return "", err
	}
	dst := filepath.Join(workDir, "source")
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return "", err
	}
	b := newBudget(limits)
	if err := writeTree(tree, dst, b); err != nil {
		return "", err
	}
	sub := &submodules{ctx: ctx, workDir: workDir, budget: b, maxFetch: limits.MaxFetchBytes}
	if err := sub.write(r, tree, dst, 0); err != nil {
		return "", err
	}
	return commit.Hash.String(), nil
}

// fetchCommit fetches the commit r names (want, when r follows a branch,
// is the expected one) into a new bare repository at repoDir and returns it.
func fetchCommit(ctx context.Context, r Remote, repoDir, want string, maxFetch int64) (*object.Commit, error) {
	auth, err := authFor(ctx, r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	repo, err := gogit.PlainInit(repoDir, true)
	if err != nil {
		return nil, err
	}
	rem, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{r.URL}})
	if err != nil {
		return nil, err
	}
	fo := &gogit.FetchOptions{
		Auth:            auth,
		CABundle:        r.CABundle,
		InsecureSkipTLS: r.InsecureSkipTLS,
		Depth:           1,
		Tags:            gogit.NoTags,
	}
	fetchCtx, tooLarge, stop := boundFetch(ctx, repoDir, maxFetch)
	defer stop()
	fetch := func() error {
		err := rem.FetchContext(fetchCtx, fo)
		if tl := tooLarge(); tl != nil {
			return tl
		}
		if err != nil && !errors.Is(err, gogit.NoErrAlreadyUpToDate) {
			return describe(ctx, err)
		}
		return nil
	}
	var local plumbing.ReferenceName = "refs/fleet/checkout"
	switch {
	case IsCommitSHA(r.Revision):
		want = r.Revision
		// Ask for the commit itself; servers that refuse unadvertised wants
		// get a full fetch of all refs instead.
		fo.RefSpecs = []config.RefSpec{config.RefSpec(r.Revision + ":" + local.String())}
		if err := fetch(); errors.Is(err, ErrTooLarge) {
			return nil, err
		} else if err != nil {
			fo.Depth = 0
			fo.Tags = gogit.AllTags
			fo.RefSpecs = []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*"}
			if err := fetch(); err != nil {
				return nil, err
			}
		}
	case r.Revision != "":
		fo.RefSpecs = []config.RefSpec{config.RefSpec("+refs/tags/" + r.Revision + ":" + local.String())}
		if err := fetch(); err != nil {
			return nil, err
		}
	default:
		fo.RefSpecs = []config.RefSpec{config.RefSpec("+refs/heads/" + r.branch() + ":" + local.String())}
		if err := fetch(); err != nil {
			return nil, err
		}
	}
	hash := plumbing.NewHash(want)
	if want == "" || !IsCommitSHA(r.Revision) {
		ref, err := repo.Reference(local, true)
		if err != nil {
			return nil, fmt.Errorf("resolving fetched ref: %w", err)
		}
		hash = ref.Hash()
	}
	// Annotated tags point at a tag object; follow it to the commit.
	if tag, err := repo.TagObject(hash); err == nil {
		c, err := tag.Commit()
		if err != nil {
			return nil, fmt.Errorf("tag %s does not point at a commit: %w", r.Revision, err)
		}
		hash = c.Hash
	}
	commit, err := repo.CommitObject(hash)
	if err != nil {
		return nil, fmt.Errorf("commit %s not found on %s: %w", hash, redact(r.URL), err)
	}
	return commit, nil
}
