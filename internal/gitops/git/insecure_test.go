package git_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// TestSSHInsecureSkipHostKeyChecks: with host key checks turned off (chart
// value insecureSkipHostKeyChecks) an SSH server is reached without
// known_hosts, or with known_hosts that do not match; turned back on, both
// are refused again. Not parallel: the setting is process-wide.
func TestSSHInsecureSkipHostKeyChecks(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	c1 := repo.Commit("master", map[string]string{"a.yaml": "a: 1\n"})
	srv := gittest.NewSSHServer(t, root)
	other := gittest.NewSSHServer(t, t.TempDir())
	ctx := context.Background()
	none := git.Remote{URL: srv.URLFor(repo), Credentials: git.Credentials{SSHKey: srv.ClientKeyPEM}, Timeout: 20 * time.Second}
	wrong := none
	wrong.Credentials.KnownHosts = []byte(strings.Fields(string(srv.KnownHosts))[0] + " " + strings.SplitN(string(other.KnownHosts), " ", 2)[1])

	git.SetInsecureSkipHostKeyChecks(true)
	t.Cleanup(func() { git.SetInsecureSkipHostKeyChecks(false) })
	for name, r := range map[string]git.Remote{"no known_hosts": none, "wrong known_hosts": wrong} {
		if got, err := git.LatestCommit(ctx, r); err != nil || got != c1 {
			t.Fatalf("insecure, %s: %q, %v", name, got, err)
		}
		if got, err := git.Fetch(ctx, r, t.TempDir(), git.FetchOptions{}); err != nil || got != c1 {
			t.Fatalf("insecure fetch, %s: %q, %v", name, got, err)
		}
	}

	git.SetInsecureSkipHostKeyChecks(false)
	_, err := git.LatestCommit(ctx, none)
	if !errors.Is(err, git.ErrBadCredentials) || !strings.Contains(err.Error(), git.KnownHostsConfigMap) {
		t.Fatalf("strict, no known_hosts: %v", err)
	}
	if _, err := git.LatestCommit(ctx, wrong); !errors.Is(err, git.ErrHostKey) {
		t.Fatalf("strict, wrong known_hosts: %v", err)
	}
}
