package gittest

import (
	"crypto/subtle"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HTTPOptions configure an HTTP git server.
type HTTPOptions struct {
	// Username/Password, when set, are required as basic auth.
	Username, Password string
	// TLS serves HTTPS with a fresh private CA (see HTTPServer.CAPEM).
	TLS bool
	// GitHubApp, when set, serves its token endpoint and requires its
	// installation tokens for git requests.
	GitHubApp *GitHubApp
}

// HTTPServer serves every bare repo under a root over git's smart HTTP
// protocol. It records the time of each ref advertisement, and can be told
// to fail or hang to test backoff and timeouts.
type HTTPServer struct {
	*httptest.Server
	// Fail makes every request answer 500 while set.
	Fail atomic.Bool
	// Hang makes every request block until the client gives up.
	Hang atomic.Bool

	mu       sync.Mutex
	refTimes []time.Time
}

// NewHTTPServer starts a server for root. It stops when the test ends.
func NewHTTPServer(t testing.TB, root string, opts HTTPOptions) *HTTPServer {
	t.Helper()
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	s := &HTTPServer{}
	cgiHandler := &cgi.Handler{
		Path: strings.TrimSpace(string(backend)) + "/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/info/refs") {
			s.mu.Lock()
			s.refTimes = append(s.refTimes, time.Now())
			s.mu.Unlock()
		}
		if s.Hang.Load() {
			<-r.Context().Done()
			return
		}
		if s.Fail.Load() {
			http.Error(w, "injected failure", http.StatusInternalServerError)
			return
		}
		if a := opts.GitHubApp; a != nil {
			if a.serveToken(w, r) {
				return
			}
			if u, p, ok := r.BasicAuth(); !ok || !a.validToken(u, p) {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if opts.Username != "" || opts.Password != "" {
			u, p, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(opts.Username)) != 1 ||
				subtle.ConstantTimeCompare([]byte(p), []byte(opts.Password)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		cgiHandler.ServeHTTP(w, r)
	})
	if opts.TLS {
		s.Server = httptest.NewTLSServer(h)
	} else {
		s.Server = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s
}

// URLFor is the clone URL of the repo.
func (s *HTTPServer) URLFor(r *Repo) string { return s.URL + "/" + r.Name }

// CAPEM is the PEM of the test server's certificate (its own CA).
func (s *HTTPServer) CAPEM() []byte {
	cert := s.Certificate()
	if cert == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// CertPool is a pool holding only the server's certificate.
func (s *HTTPServer) CertPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.Certificate())
	return p
}

// RefTimes returns when each ref advertisement was requested.
func (s *HTTPServer) RefTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.refTimes...)
}
