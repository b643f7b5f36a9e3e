package git

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"

	redactpkg "github.com/fleetgo/fleet/internal/redact"
)

// go-git by default leaves multi_ack and multi_ack_detailed out of every
// fetch request, and Azure DevOps refuses upload-pack requests without them
// (the ref lookup works, every fetch fails), so keep only thin-pack out, as
// go-git's own Azure DevOps example and Rancher's gitcloner do. go-git does
// not fully implement multi_ack negotiation over several rounds, which is
// only needed to fetch into a repository that already has objects; every
// fetch here starts from an empty repository (one round: wants, done). It is
// a process-wide go-git setting, and this package is the process's only
// go-git user.
func init() {
	transport.UnsupportedCapabilities = []capability.Capability{capability.ThinPack}
}

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
	// Revision is a fixed commit SHA, a tag, a branch name (a tag of the
	// same name wins) or "HEAD" (the remote's default branch).
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
	ref, err := LatestRef(ctx, r)
	return ref.Commit, err
}

// Ref is a ref of a remote and the commit it named when it was listed.
type Ref struct {
	// Name is the full ref name (refs/tags/v1, refs/heads/main, HEAD);
	// empty when the Revision is a commit SHA.
	Name string
	// Commit is the commit SHA.
	Commit string
}

// LatestRef is LatestCommit with the ref it resolved. Passing it to Fetch
// (FetchOptions.Ref) saves the fetch a second ref listing.
func LatestRef(ctx context.Context, r Remote) (Ref, error) {
	if IsCommitSHA(r.Revision) {
		return Ref{Commit: r.Revision}, nil
	}
	auth, err := authFor(ctx, r)
	if err != nil {
		return Ref{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	rem := gogit.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{r.URL}})
	name, hash, err := resolveRef(ctx, rem, r, auth)
	if err != nil {
		return Ref{}, err
	}
	return Ref{Name: name.String(), Commit: hash}, nil
}

// resolveRef reads the remote's ref advertisement and picks the ref r
// follows (see pickRef), with the commit it names.
func resolveRef(ctx context.Context, rem *gogit.Remote, r Remote, auth transport.AuthMethod) (plumbing.ReferenceName, string, error) {
	refs, err := rem.ListContext(ctx, &gogit.ListOptions{
		Auth:            auth,
		CABundle:        r.CABundle,
		InsecureSkipTLS: r.InsecureSkipTLS,
		PeelingOption:   gogit.AppendPeeled,
		Timeout:         int(r.timeout() / time.Second),
	})
	if err != nil {
		return "", "", describe(ctx, err)
	}
	if name, hash, ok := pickRef(refs, r); ok {
		return name, hash, nil
	}
	if r.Revision != "" {
		return "", "", fmt.Errorf("%w: revision %q on %s", ErrRefNotFound, r.Revision, redact(r.URL))
	}
	return "", "", fmt.Errorf("%w: branch %q on %s", ErrRefNotFound, r.branch(), redact(r.URL))
}

// pickRef picks, from a ref advertisement, the ref to fetch for r and the
// commit it names: for a Revision, the tag of that name (an annotated tag's
// peeled commit), else the branch of that name, or for "HEAD" the remote's
// HEAD (its default branch); without one, refs/heads/<Branch>.
func pickRef(refs []*plumbing.Reference, r Remote) (plumbing.ReferenceName, string, bool) {
	byName := map[plumbing.ReferenceName]*plumbing.Reference{}
	for _, ref := range refs {
		byName[ref.Name()] = ref
	}
	hashOf := func(n plumbing.ReferenceName) (string, bool) {
		if ref, ok := byName[n]; ok && ref.Type() == plumbing.HashReference {
			return ref.Hash().String(), true
		}
		return "", false
	}
	switch {
	case r.Revision == "HEAD":
		// Advertised as a symbolic ref to the default branch or as its
		// commit. Fetching HEAD itself gets the same commit (the fetch
		// resolves the symbolic ref in its own advertisement).
		head, ok := byName[plumbing.HEAD]
		if !ok {
			return "", "", false
		}
		if head.Type() == plumbing.SymbolicReference {
			h, ok := hashOf(head.Target())
			return plumbing.HEAD, h, ok
		}
		return plumbing.HEAD, head.Hash().String(), true
	case r.Revision != "":
		tag := plumbing.NewTagReferenceName(r.Revision)
		// A peeled annotated tag ("^{}") names the commit; prefer it.
		for _, n := range []plumbing.ReferenceName{tag + "^{}", tag} {
			if h, ok := hashOf(n); ok {
				return tag, h, true
			}
		}
		branch := plumbing.NewBranchReferenceName(r.Revision)
		h, ok := hashOf(branch)
		return branch, h, ok
	default:
		branch := plumbing.NewBranchReferenceName(r.branch())
		h, ok := hashOf(branch)
		return branch, h, ok
	}
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
	case isSSHAuthFailure(err):
		// The SSH client has no typed error for a refused key; without
		// this it would look like an outage and be retried forever.
		return fmt.Errorf("%w: the SSH server did not accept the private key: %w", transport.ErrAuthenticationRequired, err)
	case errors.Is(err, transport.ErrAuthorizationFailed):
		return fmt.Errorf("authorization failed: %w", err)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fmt.Errorf("repository not found: %w", err)
	case strings.Contains(err.Error(), "knownhosts") || strings.Contains(err.Error(), "host key"):
		return fmt.Errorf("%w: %w", ErrHostKey, err)
	}
	return err
}

// isSSHAuthFailure reports the SSH handshake's refusal of every key offered
// (golang.org/x/crypto/ssh: "ssh: unable to authenticate, attempted methods
// [none publickey], no supported methods remain").
func isSSHAuthFailure(err error) bool {
	return strings.Contains(err.Error(), "ssh: unable to authenticate")
}

// redactedError masks the user information of the URLs in its message
// (redact.URL); errors.Is and errors.As still see the original error.
type redactedError struct{ err error }

func (e *redactedError) Error() string {
	msg := e.err.Error()
	// A URL that does not parse may be cut short where its password holds
	// an unencoded '#' (the parser drops the fragment first), and the
	// parser's reason quotes the text after a ':' ("invalid port \":AbC\""),
	// which can be the start of a password: neither is shown.
	var ue *url.Error
	if errors.As(e.err, &ue) && ue.Op == "parse" {
		msg = strings.Replace(msg, ue.Error(), "the repository URL does not parse "+
			"(if it holds a user name or password, a '/', '?', '#', '@' or '%' in them must be percent-encoded)", 1)
	}
	return redactpkg.URL(msg)
}
func (e *redactedError) Unwrap() error { return e.err }

// redact masks the user information of a URL (redact.URL) before it goes
// into a message: "https://token@host/x" is "https://***@host/x".
// scp-like SSH addresses (git@host:path) are left alone: their user is a
// login name, never a secret (SSH authenticates with a key).
func redact(url string) string { return redactpkg.URL(url) }

// FetchOptions bound a checkout.
type FetchOptions struct {
	// Commit is the expected commit (from LatestCommit). When the branch has
	// moved on since, the newer commit is checked out and returned.
	Commit string
	// Ref is the ref LatestRef resolved for the same Remote. With it, a
	// Revision naming a tag, a branch or HEAD is fetched without listing
	// the remote's refs again.
	Ref    string
	Limits Limits
}

// Fetch does a shallow fetch of the remote's branch/revision into a
// temporary bare repository under workDir and writes the commit's files to
// workDir/source, with its submodules (see writeSubmodules). It returns the
// checked-out commit. A fetch that stores more than Limits.MaxFetchBytes,
// or a checkout over Limits, is ErrTooLarge.
func Fetch(ctx context.Context, r Remote, workDir string, opts FetchOptions) (string, error) {
	limits := opts.Limits.withDefaults()
	commit, err := fetchCommit(ctx, r, filepath.Join(workDir, "repo.git"), opts, limits.MaxFetchBytes)
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

// fetchCommit fetches the commit r names (opts.Commit, when r follows a
// branch, is the expected one) into a new bare repository at repoDir and
// returns it.
func fetchCommit(ctx context.Context, r Remote, repoDir string, opts FetchOptions, maxFetch int64) (*object.Commit, error) {
	want := opts.Commit
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
		// A tag, a branch or HEAD: fetch the ref LatestRef resolved, or
		// resolve it now (one more ref advertisement; a shallow fetch
		// names one ref).
		name := plumbing.ReferenceName(opts.Ref)
		if name == "" {
			if name, _, err = resolveRef(ctx, rem, r, auth); err != nil {
				return nil, err
			}
		}
		fo.RefSpecs = []config.RefSpec{config.RefSpec("+" + name.String() + ":" + local.String())}
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
