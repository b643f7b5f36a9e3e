package helmop_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// otherHostKey is a known_hosts line for addr with a key that is not the
// server's, as after a server's key changed or an attacker took its place.
func otherHostKey(t *testing.T, addr string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return knownhosts.Line([]string{addr}, key) + "\n"
}

// failingWith waits until the HelmOp is not Ready with a message holding
// want, and has written no Bundle.
func failingWith(t *testing.T, ns, name, want string) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		c := condition(getOp(t, ns, name), fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, want) {
			return fmt.Errorf("%s: ready = %+v, want a message with %q", name, c, want)
		}
		if b := bundleOf(t, ns, name); b != nil {
			return fmt.Errorf("%s: bundle %s written", name, b.Name)
		}
		return nil
	})
}

// TestHelmOpSSHKnownHostsFromConfigMap: a HelmOp whose helm Secret holds
// only ssh-privatekey has its git:: chart's SSH server verified against
// the manager's known-hosts ConfigMap, as a GitRepo's chart sources are
// (and as Rancher Fleet does). Without the ConfigMap, or with one that
// does not list the server, the build fails with a message naming the
// server, and recovers by itself once the ConfigMap lists it. known_hosts
// in the helm Secret come first: a wrong entry there is not overridden by
// the ConfigMap. The key never reaches a condition or an event.
func TestHelmOpSSHKnownHostsFromConfigMap(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "sshknownhosts")
	root := t.TempDir()
	repo := chartRepo(t, root, "charts")
	srv := gittest.NewSSHServer(t, root)
	chart := "git::" + srv.URLFor(repo) + "//charts/app?ref=v1.0.0"
	for name, data := range map[string]map[string][]byte{
		"key-only":     {"ssh-privatekey": srv.ClientKeyPEM},
		"wrong-listed": {"ssh-privatekey": srv.ClientKeyPEM, "known_hosts": []byte(otherHostKey(t, srv.Addr))},
	} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
		if err := env.Client.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}

	if err := env.Client.Create(ctx, gitOp(ns, "ssh", chart, "key-only")); err != nil {
		t.Fatal(err)
	}
	failingWith(t, ns, "ssh", "needs known_hosts to verify the SSH server "+srv.Addr)

	github := fleettest.GitHubKnownHosts
	fleettest.SetKnownHostsConfigMap(t, env.Client, systemNamespace, github)
	failingWith(t, ns, "ssh", "SSH server "+srv.Addr+" is not in known_hosts")

	// Listing the server is enough: the failing HelmOp's retry picks it up.
	fleettest.SetKnownHostsConfigMap(t, env.Client, systemNamespace, github+string(srv.KnownHosts))
	fleettest.Eventually(t, timeout, func() error { return deployedFromGit(t, ns, "ssh") })

	// The helm Secret's known_hosts win over the ConfigMap's.
	if err := env.Client.Create(ctx, gitOp(ns, "secret-first", chart, "wrong-listed")); err != nil {
		t.Fatal(err)
	}
	failingWith(t, ns, "secret-first", "SSH server "+srv.Addr+" presented a host key that does not match")

	noSecretIn(t, ns, []string{"ssh", "secret-first"}, srv.ClientKeyPEM)
}
