package bundlereader

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// paddedChart is a chart archive whose template expands to size bytes and
// compresses to almost nothing.
func paddedChart(t *testing.T, name string, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{name: name + "/Chart.yaml", data: []byte("apiVersion: v2\nname: " + name + "\nversion: 1.0.0\n")},
		{name: name + "/templates/pad.yaml", data: append([]byte("# "), bytes.Repeat([]byte("x"), size)...)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// depRepo serves n charts dep0 … dep<n-1> of size bytes each and counts
// the chart archives it sends. It returns its URL, the counter and a
// bundle whose local chart depends on all of them.
func depRepo(t *testing.T, n, size int) (string, *atomic.Int32, map[string]string) {
	t.Helper()
	charts := map[string][]byte{}
	index := "apiVersion: v1\nentries:\n"
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("dep%d", i)
		charts[name+"-1.0.0.tgz"] = paddedChart(t, name, size)
		index += "  " + name + ":\n  - name: " + name + "\n    version: 1.0.0\n    urls: [" + name + "-1.0.0.tgz]\n"
	}
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p := strings.TrimPrefix(req.URL.Path, "/")
		if p == "index.yaml" {
			_, _ = w.Write([]byte(index))
			return
		}
		data, ok := charts[p]
		if !ok {
			http.NotFound(w, req)
			return
		}
		served.Add(1)
		_, _ = w.Write(data)
	}))
	t.Cleanup(srv.Close)
	chartYAML := "apiVersion: v2\nname: umbrella\nversion: 0.1.0\ndependencies:\n"
	for i := 0; i < n; i++ {
		chartYAML += fmt.Sprintf("- name: dep%d\n  version: 1.0.0\n  repository: %s\n", i, srv.URL)
	}
	return srv.URL, &served, map[string]string{
		"fleet.yaml":             "helm:\n  chart: chart\n",
		"chart/Chart.yaml":       chartYAML,
		"chart/templates/a.yaml": "kind: ConfigMap\n",
	}
}

// TestChartDownloadsShareTheReadBudget: the files of downloaded charts
// count against MaxTotalSize like the repository's own files, so a chart
// with many dependencies that each expand to a lot (compressing to almost
// nothing) fails with ErrLimit as soon as the budget is spent, without
// fetching the rest, instead of holding them all in the manager's memory.
func TestChartDownloadsShareTheReadBudget(t *testing.T) {
	const deps, size = 10, 400 << 10
	_, served, files := depRepo(t, deps, size)
	_, err := readOne(t, writeRepo(t, files), Options{Limits: Limits{MaxTotalSize: 1 << 20}})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("err = %v, want ErrLimit", err)
	}
	if !strings.Contains(err.Error(), "exceed the limit of 1048576 bytes") {
		t.Errorf("err = %v, want the budget named", err)
	}
	// 1 MiB holds two 400 KiB charts; the third exceeds it.
	if n := served.Load(); n > 3 {
		t.Errorf("%d of %d dependencies downloaded after the budget was spent", n, deps)
	}

	// The same bundle within the budget builds.
	b, err := readOne(t, writeRepo(t, files), Options{Limits: Limits{MaxTotalSize: 8 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := resourceNames(b)["chart/charts/dep9/templates/pad.yaml"]; !ok {
		t.Errorf("last dependency missing: %v", resourceNames(b))
	}
}

// TestChartDownloadsAreCapped: one bundle fetches at most
// MaxChartDownloads charts, however small, and stops at the first one
// over the cap.
func TestChartDownloadsAreCapped(t *testing.T) {
	_, served, files := depRepo(t, 6, 10)
	_, err := readOne(t, writeRepo(t, files), Options{Limits: Limits{MaxChartDownloads: 4}})
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "at most 4 charts") {
		t.Fatalf("err = %v, want ErrLimit naming the cap", err)
	}
	if n := served.Load(); n != 4 {
		t.Errorf("%d charts downloaded, want 4", n)
	}
	if _, err := readOne(t, writeRepo(t, files), Options{Limits: Limits{MaxChartDownloads: 6}}); err != nil {
		t.Fatalf("6 downloads within a cap of 6: %v", err)
	}
}
