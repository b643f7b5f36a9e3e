package bundlereader

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	helmreg "helm.sh/helm/v4/pkg/registry"
	"sigs.k8s.io/yaml"
)

func extractTestMeta(data []byte) (*chartv2.Metadata, error) {
	_, files, err := extractChart(data, DefaultLimits, nil)
	if err != nil {
		return nil, err
	}
	meta := &chartv2.Metadata{}
	return meta, yaml.Unmarshal(fileContent(files, "Chart.yaml"), meta)
}

// ociRegistry starts an in-process OCI registry (optionally behind basic
// auth) and pushes the charts to it with Helm's registry client. It returns
// the host:port.
func ociRegistry(t *testing.T, user, password string, charts ...[]byte) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if user != "" {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			u, p, ok := req.BasicAuth()
			if !ok || u != user || p != password {
				w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, req)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	opts := []helmreg.ClientOption{helmreg.ClientOptPlainHTTP(), helmreg.ClientOptWriter(&bytes.Buffer{})}
	if user != "" {
		opts = append(opts, helmreg.ClientOptBasicAuth(user, password))
	}
	rc, err := helmreg.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range charts {
		meta, err := extractTestMeta(c)
		if err != nil {
			t.Fatal(err)
		}
		ref := host + "/charts/" + meta.Name + ":" + strings.ReplaceAll(meta.Version, "+", "_")
		if _, err := rc.Push(c, ref); err != nil {
			t.Fatalf("push %s: %v", ref, err)
		}
	}
	return host
}

// zipBomb is a valid gzip'd tar whose single file expands to size bytes.
func zipBomb(t *testing.T, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	_ = tw.WriteHeader(&tar.Header{Name: "bomb/Chart.yaml", Mode: 0o644, Size: 40, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("apiVersion: v2\nname: bomb\nversion: 1.0.0"))
	_ = tw.WriteHeader(&tar.Header{Name: "bomb/templates/big.yaml", Mode: 0o644, Size: size, Typeflag: tar.TypeReg})
	zeros := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(zeros)) {
		n := min(left, int64(len(zeros)))
		_, _ = tw.Write(zeros[:n])
	}
	_ = tw.Close()
	_ = gz.Close()
	return buf.Bytes()
}

// writeRepo writes files (path -> content) under a new temp directory.
func writeRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
