package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// chartArchive is a minimal chart archive (Chart.yaml and one template).
func chartArchive(t *testing.T, name string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for file, data := range map[string]string{
		name + "/Chart.yaml":        "apiVersion: v2\nname: " + name + "\nversion: 1.0.0\n",
		name + "/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n",
	} {
		if err := tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
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

// umbrellaRepo serves charts dep0 … dep<n-1> from a Helm repository on
// 127.0.0.1, counting the archives it sends, and writes a bundle whose
// local chart depends on all of them.
func umbrellaRepo(t *testing.T, n int) (string, *atomic.Int32) {
	t.Helper()
	archives := map[string][]byte{}
	index := "apiVersion: v1\nentries:\n"
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("dep%d", i)
		archives["/"+name+"-1.0.0.tgz"] = chartArchive(t, name)
		index += "  " + name + ":\n  - name: " + name + "\n    version: 1.0.0\n    urls: [" + name + "-1.0.0.tgz]\n"
	}
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/index.yaml" {
			_, _ = w.Write([]byte(index))
			return
		}
		data, ok := archives[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
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
	return writeFiles(t, map[string]string{
		"app/fleet.yaml":             "helm:\n  chart: chart\n",
		"app/chart/Chart.yaml":       chartYAML,
		"app/chart/templates/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
	}), &served
}

// TestApplyMaxChartDownloads: --max-chart-downloads caps the charts one
// bundle fetches over the network (here the dependencies of its chart):
// over the cap the command fails naming it, prints nothing and stops
// downloading at the cap; at the cap, and by default (100), it builds.
func TestApplyMaxChartDownloads(t *testing.T) {
	dir, served := umbrellaRepo(t, 3)

	out, _, err := runFleet(t, dir, "", "apply", "-o", "-", "r", "app", "--max-chart-downloads", "2")
	if err == nil || !strings.Contains(err.Error(), "a bundle may fetch at most 2 charts") {
		t.Fatalf("err = %v, want the cap of 2 named", err)
	}
	if out != "" {
		t.Errorf("printed output despite the error:\n%s", out)
	}
	if n := served.Load(); n != 2 {
		t.Errorf("%d charts downloaded with a cap of 2", n)
	}

	for _, args := range [][]string{{"--max-chart-downloads", "3"}, nil} {
		out, _, err := runFleet(t, dir, "", append([]string{"apply", "-o", "-", "r", "app"}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(out, "chart/charts/dep2/templates/cm.yaml") {
			t.Errorf("%v: the last dependency is not in the bundle:\n%s", args, out)
		}
	}

	if _, _, err := runFleet(t, dir, "", "apply", "-o", "-", "r", "app", "--max-chart-downloads", "-1"); err == nil ||
		!strings.Contains(err.Error(), "--max-chart-downloads must not be negative") {
		t.Errorf("negative cap: err = %v", err)
	}
}

// TestApplyFleetKnownHosts: FLEET_KNOWN_HOSTS, the variable Rancher
// Fleet's GitOps job hands `fleet apply`, verifies git:: chart sources
// over SSH, and wins over SSH_KNOWN_HOSTS; a server in neither is refused
// with an error naming it.
func TestApplyFleetKnownHosts(t *testing.T) {
	srv, chart := sshChartServer(t)
	keys := writeFiles(t, map[string]string{"good": string(srv.ClientKeyPEM)})
	dir := writeFiles(t, map[string]string{"app/fleet.yaml": "helm:\n  chart: " + chart + "\n"})
	github := "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
	args := []string{"apply", "-o", "-", "r", "app", "--ssh-privatekey-file", filepath.Join(keys, "good")}

	t.Setenv(knownHostsEnv, "")
	t.Setenv(fleetKnownHostsEnv, string(srv.KnownHosts))
	out, _, err := runFleet(t, dir, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "version: 1.0.0") || !strings.Contains(out, "v: one") {
		t.Errorf("bundle lacks the chart of v1.0.0:\n%s", out)
	}
	noKeyIn(t, "output", out, srv.ClientKeyPEM)

	t.Setenv(knownHostsEnv, string(srv.KnownHosts))
	t.Setenv(fleetKnownHostsEnv, github)
	if _, _, err := runFleet(t, dir, "", args...); err == nil || !strings.Contains(err.Error(), "SSH server "+srv.Addr+" is not in known_hosts") {
		t.Errorf("FLEET_KNOWN_HOSTS without the server: err = %v, want the server named", err)
	}
}

// TestApplyCredentialsByPathGlob: a key of --helm-credentials-by-path-file
// may be a glob (path.Match: * stays within one directory); the bundle it
// matches gets its credentials, the others none.
func TestApplyCredentialsByPathGlob(t *testing.T) {
	srv, chart := sshChartServer(t)
	t.Setenv(fleetKnownHostsEnv, string(srv.KnownHosts))
	fleetYAML := "helm:\n  chart: " + chart + "\n"
	dir := writeFiles(t, map[string]string{"apps/web/fleet.yaml": fleetYAML, "other/web/fleet.yaml": fleetYAML})
	creds := filepath.Join(writeFiles(t, map[string]string{
		"creds.yaml": "apps/*:\n  sshPrivateKey: " + base64.StdEncoding.EncodeToString(srv.ClientKeyPEM) + "\n",
	}), "creds.yaml")

	out, _, err := runFleet(t, dir, "", "apply", "-o", "-", "r", "apps", "--helm-credentials-by-path-file", creds)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "name: r-apps-web\n") || !strings.Contains(out, "v: one") {
		t.Errorf("apps/web lacks the chart:\n%s", out)
	}
	if _, _, err := runFleet(t, dir, "", "apply", "-o", "-", "r", "other", "--helm-credentials-by-path-file", creds); err == nil ||
		!strings.Contains(err.Error(), "no SSH private key is set") {
		t.Errorf("other/web: err = %v, want no key", err)
	}
}

// TestApplyHelpDocumentsLimitsAndGlobs: `fleet apply --help` tells what
// the code does: the chart download cap and its default, glob keys of the
// per-path credentials, and where host keys come from.
func TestApplyHelpDocumentsLimitsAndGlobs(t *testing.T) {
	out, _, err := runFleet(t, t.TempDir(), "", "apply", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--max-chart-downloads", "(default 100)", "glob", fleetKnownHostsEnv} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
}
