package install_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/pki"
)

// httpsGetEnv makes the test binary, re-run by TestControllerChartProxyCACert,
// GET that URL with Go's default client (the system roots, as git, Helm
// and OCI fetches without a caBundle use) and exit instead of testing.
const httpsGetEnv = "FLEET_INSTALL_TEST_HTTPS_GET"

func init() {
	url := os.Getenv(httpsGetEnv)
	if url == "" {
		return
	}
	resp, err := http.Get(url) //nolint:gosec,noctx // the test's own server
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = resp.Body.Close()
	os.Exit(0)
}

// TestControllerChartProxyCACert: Rancher's proxyCACert (the CA of a
// TLS-intercepting proxy) is written into ConfigMap proxy-ca (key
// proxy.crt, as Rancher's chart names it) and mounted into
// fleet-controller so that the system roots, which its git, Helm and OCI
// fetches trust, include it. Checked for real: a Go client given the
// rendered mount and environment (paths moved under a temporary
// directory) trusts a server whose certificate that CA signed, and does
// not without them.
func TestControllerChartProxyCACert(t *testing.T) {
	ca, err := pki.NewCA("intercepting proxy")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{CommonName: "proxy", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()

	out, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system",
		Values: map[string]any{"proxyCACert": string(ca.CertPEM), "shards": []any{map[string]any{"id": "s1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cm := byKey(t, out)["ConfigMap/cattle-fleet-system/proxy-ca"]
	if cm == nil {
		t.Fatal("no ConfigMap proxy-ca")
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if strings.TrimSpace(data["proxy.crt"]) != strings.TrimSpace(string(ca.CertPEM)) {
		t.Fatalf("proxy-ca data %v", data)
	}
	deps := renderDeployments(t, charts.Controller, map[string]any{"proxyCACert": string(ca.CertPEM), "shards": []any{map[string]any{"id": "s1"}}})
	for name, d := range deps {
		root := t.TempDir()
		env := podFilesystem(t, d.Spec.Template.Spec, container(t, d), root, data)
		if err := httpsGet(srv.URL, env...); err != nil {
			t.Errorf("%s: a client with the rendered proxy CA does not trust the proxy: %v", name, err)
		}
	}
	if err := httpsGet(srv.URL); err == nil {
		t.Fatal("the server is trusted without the proxy CA: the test proves nothing")
	}
	if env := envOf(container(t, renderDeployments(t, charts.Controller, map[string]any{})["fleet-controller"])); env["SSL_CERT_DIR"] != "" {
		t.Errorf("without proxyCACert the controller gets SSL_CERT_DIR=%s", env["SSL_CERT_DIR"])
	}
	if _, err := install.Render(charts.Controller, install.RenderOptions{Namespace: "cattle-fleet-system", Values: map[string]any{"proxyCACert": "not a certificate"}}); err == nil || !strings.Contains(err.Error(), "proxyCACert must be PEM") {
		t.Errorf("proxyCACert that is no PEM: err = %v", err)
	}
}

// podFilesystem writes the ConfigMap data of the container's proxy-ca
// mount under root and returns the container's SSL_CERT_DIR with that
// mount's path moved under root (other directories are the host's).
func podFilesystem(t *testing.T, pod corev1.PodSpec, c corev1.Container, root string, data map[string]string) []string {
	t.Helper()
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == "proxy-ca" {
				dir := filepath.Join(root, m.MountPath)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for k, val := range data {
					if err := os.WriteFile(filepath.Join(dir, k), []byte(val), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				mounts[m.MountPath] = dir
			}
		}
	}
	if len(mounts) == 0 {
		t.Fatal("ConfigMap proxy-ca is not mounted")
	}
	dirs := strings.Split(envOf(c)["SSL_CERT_DIR"], ":")
	for i, d := range dirs {
		if moved, ok := mounts[d]; ok {
			dirs[i] = moved
		}
	}
	return []string{"SSL_CERT_DIR=" + strings.Join(dirs, ":")}
}

// httpsGet GETs url from a new process (Go loads the system roots once per
// process) with env added to this one's.
func httpsGet(url string, env ...string) error {
	cmd := exec.Command(os.Args[0])
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SSL_CERT_DIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append([]string{httpsGetEnv + "=" + url}, env...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}
