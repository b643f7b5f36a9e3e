package helmop_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"testing"

	"github.com/fleetgo/fleet/internal/pki"
)

// githubProxy is the HTTPS proxy of this package's tests (HTTPS_PROXY,
// set in TestMain before anything reads it, since Go reads the proxy
// environment once per process). It tunnels CONNECT github.com:443 to the
// backend a test routes it to and refuses every other host, so that a
// chart named by a GitHub shorthand is read from a local git server and no
// test of this package leaves the machine. Loopback addresses, where every
// other test server listens, never go through a proxy.
type githubProxy struct {
	srv *http.Server
	ln  net.Listener

	mu      sync.Mutex
	backend string   // host:port github.com:443 is tunnelled to; "" refuses
	refused []string // CONNECT targets refused
}

// startGitHubProxy listens on loopback and points HTTPS_PROXY at it.
func startGitHubProxy() (*githubProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &githubProxy{ln: ln}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve)}
	go func() { _ = p.srv.Serve(ln) }()
	if err := os.Setenv("HTTPS_PROXY", "http://"+ln.Addr().String()); err != nil {
		_ = p.srv.Close()
		return nil, err
	}
	return p, nil
}

func (p *githubProxy) Close() { _ = p.srv.Close() }

func (p *githubProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	backend := p.backend
	if r.Method != http.MethodConnect || r.Host != "github.com:443" || backend == "" {
		p.refused = append(p.refused, r.Host)
		p.mu.Unlock()
		http.Error(w, "this test proxy only reaches github.com", http.StatusForbidden)
		return
	}
	p.mu.Unlock()
	upstream, err := net.Dial("tcp", backend)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	_, _ = io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() { _, _ = io.Copy(upstream, conn); _ = upstream.Close() }()
	_, _ = io.Copy(conn, upstream)
	_ = conn.Close()
}

// fakeGitHub is an HTTPS server with a certificate for github.com from
// its own CA (CAPEM, which a helm Secret's cacerts must trust), serving
// the git repositories of a local git server and recording the basic-auth
// credentials each request carried.
type fakeGitHub struct {
	CAPEM []byte

	mu    sync.Mutex
	auths []string // "user:password" of each request, "" without
}

// routeGitHub makes github.com, for the rest of the test, the git server
// at gitURL (as served by gittest.NewHTTPServer).
func routeGitHub(t *testing.T, gitURL string) *fakeGitHub {
	t.Helper()
	ca, err := pki.NewCA("fake github CA")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{CommonName: "github.com", DNSNames: []string{"github.com"}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(gitURL)
	if err != nil {
		t.Fatal(err)
	}
	gh := &fakeGitHub{CAPEM: ca.CertPEM}
	git := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		gh.mu.Lock()
		if ok {
			gh.auths = append(gh.auths, user+":"+pass)
		} else {
			gh.auths = append(gh.auths, "")
		}
		gh.mu.Unlock()
		git.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	ghProxy.mu.Lock()
	ghProxy.backend = srv.Listener.Addr().String()
	ghProxy.mu.Unlock()
	t.Cleanup(func() {
		ghProxy.mu.Lock()
		ghProxy.backend = ""
		ghProxy.mu.Unlock()
		srv.Close()
	})
	return gh
}

// Auths are the credentials of the requests so far ("" for none).
func (gh *fakeGitHub) Auths() []string {
	gh.mu.Lock()
	defer gh.mu.Unlock()
	return append([]string(nil), gh.auths...)
}
