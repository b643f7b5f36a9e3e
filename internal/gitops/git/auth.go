// Package git talks to git servers in pure Go (go-git): a cheap remote ref
// lookup to learn the current commit, and a shallow fetch that writes one
// commit's files into a directory, bounded in size and refusing symlinks that
// point out of the checkout. No git binary is needed at run time.
package git

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys read from a client Secret. They match Kubernetes' basic-auth and
// ssh-auth Secret types, plus `token` and `known_hosts` as Fleet uses them.
const (
	KeyUsername   = corev1.BasicAuthUsernameKey // "username"
	KeyPassword   = corev1.BasicAuthPasswordKey // "password"
	KeyToken      = "token"
	KeySSHKey     = corev1.SSHAuthPrivateKey // "ssh-privatekey"
	KeyKnownHosts = "known_hosts"
)

// KnownHostsConfigMap is the ConfigMap, in the manager's namespace, whose
// KeyKnownHosts entry verifies SSH servers for GitRepos whose client Secret
// has no known_hosts (as in Fleet; the chart fills it with the public git
// hosts' keys and additionalKnownHosts).
const KnownHostsConfigMap = "known-hosts"

// ReadKnownHostsConfigMap returns the KeyKnownHosts entry of the
// KnownHostsConfigMap in namespace, the manager's. Nil, and no error, when
// namespace is empty or the ConfigMap does not exist: an SSH server is then
// verified against nothing but the client Secret's known_hosts, and the
// clone or chart fetch reports the missing key. GitRepo clones, their git::
// chart sources and HelmOps read it here, so they agree on where it is and
// how its absence is treated.
func ReadKnownHostsConfigMap(ctx context.Context, r client.Reader, namespace string) ([]byte, error) {
	if namespace == "" {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: KnownHostsConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, KnownHostsConfigMap, err)
	}
	return []byte(cm.Data[KeyKnownHosts]), nil
}

// insecureSkipHostKeyChecks is the manager's --insecure-skip-host-key-checks.
var insecureSkipHostKeyChecks atomic.Bool

// SetInsecureSkipHostKeyChecks makes SSH accept any server host key, with
// or without known_hosts (Fleet's chart value insecureSkipHostKeyChecks).
// It is insecure: anyone in the network path can then impersonate the git
// server. A process-wide setting, as the manager has one.
func SetInsecureSkipHostKeyChecks(skip bool) { insecureSkipHostKeyChecks.Store(skip) }

// Credentials are what a client Secret holds. Only the fields relevant to the
// repo URL's scheme are used.
type Credentials struct {
	Username   string
	Password   string
	SSHKey     []byte
	KnownHosts []byte
	// GitHubApp, when set, is used instead of Username/Password for
	// HTTPS (keys github_app_*).
	GitHubApp *GitHubApp
	// invalid is what was wrong with the Secret's keys, reported by every
	// remote call.
	invalid error
}

// CredentialsFromSecret reads a basic-auth, ssh-auth or Opaque Secret. A
// `token` key is used as the password (GitHub/GitLab tokens work with any user
// name).
func CredentialsFromSecret(s *corev1.Secret) Credentials {
	if s == nil {
		return Credentials{}
	}
	c := Credentials{
		Username:   string(s.Data[KeyUsername]),
		Password:   string(s.Data[KeyPassword]),
		SSHKey:     s.Data[KeySSHKey],
		KnownHosts: s.Data[KeyKnownHosts],
	}
	if c.Password == "" && len(s.Data[KeyToken]) > 0 {
		c.Password = string(s.Data[KeyToken])
	}
	c.GitHubApp, c.invalid = gitHubAppFromSecret(s.Data)
	return c
}

// IsSSH reports whether url is an SSH URL (ssh:// or scp-like user@host:path).
func IsSSH(url string) bool {
	if strings.HasPrefix(url, "ssh://") {
		return true
	}
	if strings.Contains(url, "://") {
		return false
	}
	at := strings.Index(url, "@")
	colon := strings.Index(url, ":")
	return at > 0 && colon > at
}

// ErrBadCredentials marks a problem with the client Secret itself (not with
// the server); retrying without a change to the Secret will not help.
var ErrBadCredentials = errors.New("invalid git credentials")

// authFor turns credentials into a go-git AuthMethod for url. SSH checks
// the server's host key against known_hosts (the client Secret's, else the
// known-hosts ConfigMap's, which the caller puts in Credentials): without
// known_hosts an SSH repo is refused rather than trusted on first use,
// unless host key checks are turned off (SetInsecureSkipHostKeyChecks).
func authFor(ctx context.Context, r Remote) (transport.AuthMethod, error) {
	url, c, timeout := r.URL, r.Credentials, r.timeout()
	if c.invalid != nil {
		return nil, c.invalid
	}
	if c.GitHubApp != nil && !IsSSH(url) {
		token, err := c.GitHubApp.installationToken(ctx, r)
		if err != nil {
			return nil, err
		}
		return &githttp.BasicAuth{Username: "x-access-token", Password: token}, nil
	}
	if !IsSSH(url) {
		if c.Username == "" && c.Password == "" {
			return nil, nil
		}
		user := c.Username
		if user == "" {
			user = "git"
		}
		return &githttp.BasicAuth{Username: user, Password: c.Password}, nil
	}
	if len(c.SSHKey) == 0 {
		return nil, fmt.Errorf("%w: ssh repo needs a Secret with %q", ErrBadCredentials, KeySSHKey)
	}
	insecure := insecureSkipHostKeyChecks.Load()
	if len(c.KnownHosts) == 0 && !insecure {
		return nil, fmt.Errorf("%w: ssh repo needs %q, in the client Secret or in the manager's ConfigMap %s, to verify the server", ErrBadCredentials, KeyKnownHosts, KnownHostsConfigMap)
	}
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		// The parser's message quotes the URL, password and all.
		return nil, fmt.Errorf("parsing repo URL: %w", &redactedError{err: err})
	}
	user := ep.User
	if user == "" {
		user = "git"
	}
	pk, err := gitssh.NewPublicKeys(user, c.SSHKey, "")
	if err != nil {
		return nil, fmt.Errorf("%w: parsing %s: %v", ErrBadCredentials, KeySSHKey, err)
	}
	if insecure {
		pk.HostKeyCallback = ssh.InsecureIgnoreHostKey() //nolint:gosec // asked for with --insecure-skip-host-key-checks
		return &sshAuth{PublicKeys: pk, timeout: timeout}, nil
	}
	db, err := knownHostsDB(c.KnownHosts)
	if err != nil {
		return nil, fmt.Errorf("%w: parsing %s: %v", ErrBadCredentials, KeyKnownHosts, err)
	}
	port := ep.Port
	if port == 0 {
		port = 22
	}
	hostPort := net.JoinHostPort(ep.Host, fmt.Sprint(port))
	pk.HostKeyCallback = db.HostKeyCallback()
	return &sshAuth{PublicKeys: pk, algos: db.HostKeyAlgorithms(hostPort), timeout: timeout}, nil
}

// sshAuth adds the host key algorithms known for the host, so that the
// server presents a key we can check, and a dial timeout against hung servers.
type sshAuth struct {
	*gitssh.PublicKeys
	algos   []string
	timeout time.Duration
}

func (a *sshAuth) ClientConfig() (*ssh.ClientConfig, error) {
	cfg, err := a.PublicKeys.ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.HostKeyAlgorithms = a.algos
	cfg.Timeout = a.timeout
	return cfg, nil
}

// knownHostsDB parses known_hosts content. The parser reads files only, so the
// content goes through a short-lived private temp file.
func knownHostsDB(content []byte) (*knownhosts.HostKeyDB, error) {
	f, err := os.CreateTemp("", "known_hosts-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(content); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return knownhosts.NewDB(f.Name())
}
