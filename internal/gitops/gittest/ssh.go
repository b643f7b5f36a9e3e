package gittest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHServer serves the bare repos under a root over SSH (upload-pack only)
// to clients holding ClientKey.
type SSHServer struct {
	Addr string
	// ClientKeyPEM is the private key (OpenSSH PEM) a client must use.
	ClientKeyPEM []byte
	// KnownHosts is a known_hosts line for this server's host key.
	KnownHosts []byte
	hostKey    ssh.PublicKey
	srv        *gliderssh.Server
}

// NewKeyPEM makes an ed25519 private key in OpenSSH PEM form.
func NewKeyPEM(t testing.TB) ([]byte, ssh.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), signer
}

// NewSSHServer starts a server on 127.0.0.1. It stops when the test ends.
func NewSSHServer(t testing.TB, root string) *SSHServer {
	t.Helper()
	clientPEM, clientSigner := NewKeyPEM(t)
	_, hostSigner := NewKeyPEM(t)
	allowed := clientSigner.PublicKey()
	srv := &gliderssh.Server{
		Handler: func(s gliderssh.Session) {
			code := serveGit(s, root)
			_ = s.Exit(code)
		},
		PublicKeyHandler: func(_ gliderssh.Context, key gliderssh.PublicKey) bool {
			return gliderssh.KeysEqual(key, allowed)
		},
	}
	srv.AddHostKey(hostSigner)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	return &SSHServer{
		Addr:         addr,
		ClientKeyPEM: clientPEM,
		KnownHosts:   []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, hostSigner.PublicKey()) + "\n"),
		hostKey:      hostSigner.PublicKey(),
		srv:          srv,
	}
}

// URLFor is the ssh:// clone URL of the repo.
func (s *SSHServer) URLFor(r *Repo) string {
	return fmt.Sprintf("ssh://git@%s/%s", s.Addr, r.Name)
}

// serveGit runs git-upload-pack for the requested repo, confined to root.
func serveGit(s gliderssh.Session, root string) int {
	args := s.Command()
	if len(args) != 2 || args[0] != "git-upload-pack" {
		_, _ = fmt.Fprintf(s.Stderr(), "only git-upload-pack is served\n")
		return 1
	}
	rel := filepath.Clean("/" + strings.Trim(args[1], "'"))
	cmd := exec.Command("git-upload-pack", filepath.Join(root, rel))
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "HOME=" + root, "PATH=/usr/bin:/bin:/usr/lib/git-core"}
	cmd.Stdout = s
	cmd.Stderr = io.Discard
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 1
	}
	if err := cmd.Start(); err != nil {
		return 1
	}
	// Not waited for: the client may keep its side open after the pack.
	go func() { _, _ = io.Copy(stdin, s); _ = stdin.Close() }()
	if err := cmd.Wait(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return 1
	}
	return 0
}
