package git_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// TestSSHRefusedKeyIsPermanent: a client key the SSH server refuses is an
// authentication error (IsPermanent), for the ref lookup and the fetch,
// with a message saying so; a controller then marks the object Stalled
// instead of retrying it as an outage.
func TestSSHRefusedKeyIsPermanent(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	repo.Commit("master", map[string]string{"a.yaml": "a: 1\n"})
	srv := gittest.NewSSHServer(t, root)
	wrongKey, _ := gittest.NewKeyPEM(t)
	remote := git.Remote{
		URL:         srv.URLFor(repo),
		Credentials: git.Credentials{SSHKey: wrongKey, KnownHosts: srv.KnownHosts},
		Timeout:     20 * time.Second,
	}
	ctx := context.Background()
	_, lookupErr := git.LatestCommit(ctx, remote)
	_, fetchErr := git.Fetch(ctx, remote, t.TempDir(), git.FetchOptions{})
	for what, err := range map[string]error{"lookup": lookupErr, "fetch": fetchErr} {
		if !errors.Is(err, transport.ErrAuthenticationRequired) || !git.IsPermanent(err) ||
			!strings.Contains(err.Error(), "did not accept the private key") {
			t.Errorf("%s: %v, want a permanent authentication error", what, err)
		}
	}
}
