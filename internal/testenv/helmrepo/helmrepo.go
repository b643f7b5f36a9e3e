// Package helmrepo is an in-process Helm chart repository for tests: a real
// HTTP server with an index.yaml and packaged charts, optionally behind
// basic auth, to which a test can publish new chart versions while a
// controller polls it.
package helmrepo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"
)

// Chart packages a chart with one ConfigMap template (named after the
// chart, its data the chart version and the value "greeting") and the
// given dependencies, and returns the .tgz.
func Chart(t testing.TB, name, version string, deps ...*chartv2.Dependency) []byte {
	t.Helper()
	c := &chartv2.Chart{
		Metadata: &chartv2.Metadata{APIVersion: "v2", Name: name, Version: version, Dependencies: deps},
		Templates: []*common.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  version: " + version +
				"\n  greeting: {{ .Values.greeting | quote }}\n")}},
		Values: map[string]any{"greeting": "hello"},
	}
	p, err := chartutil.Save(c, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Options configure a Server.
type Options struct {
	// Username and Password, when set, are required (basic auth).
	Username, Password string
	// TLS serves HTTPS with a certificate of its own (see CAPEM); failed
	// handshakes, which such tests provoke, are not logged.
	TLS bool
}

// Server is a running chart repository.
type Server struct {
	URL  string
	opts Options
	srv  *httptest.Server

	mu       sync.Mutex
	charts   map[string][]byte
	index    *repo.IndexFile
	requests int
}

// New starts a repository that stops with the test.
func New(t testing.TB, opts Options) *Server {
	s := &Server{opts: opts, charts: map[string][]byte{}, index: repo.NewIndexFile()}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if opts.TLS {
		s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// Publish adds a packaged chart (see Chart) to the index.
func (s *Server) Publish(t testing.TB, tgz []byte) {
	t.Helper()
	c, err := loader.LoadArchive(bytes.NewReader(tgz))
	if err != nil {
		t.Fatal(err)
	}
	file := c.Metadata.Name + "-" + c.Metadata.Version + ".tgz"
	d := sha256.Sum256(tgz)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.charts[file] = tgz
	if err := s.index.MustAdd(c.Metadata, file, "", hex.EncodeToString(d[:])); err != nil {
		t.Fatal(err)
	}
	s.index.SortEntries()
}

// PutFile serves data under name without adding it to the index (a chart
// URL, or content that is not a valid chart).
func (s *Server) PutFile(name string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.charts[name] = data
}

// CAPEM is the PEM of the certificate a TLS server presents.
func (s *Server) CAPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
}

// Close stops serving: requests fail as for an unreachable repository.
func (s *Server) Close() { s.srv.Close() }

// Requests counts the requests served so far.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if s.opts.Username != "" {
		u, p, ok := req.BasicAuth()
		if !ok || u != s.opts.Username || p != s.opts.Password {
			w.Header().Set("WWW-Authenticate", `Basic realm="charts"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	}
	name := strings.TrimPrefix(req.URL.Path, "/")
	if name == "index.yaml" {
		out, err := yaml.Marshal(s.index)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(out)
		return
	}
	data, ok := s.charts[name]
	if !ok {
		http.NotFound(w, req)
		return
	}
	_, _ = w.Write(data)
}
