package testenv

import (
	"os"
	"path/filepath"
	"time"

	"github.com/fleetgo/fleet/internal/pki"
)

// frontProxyArgs writes a front-proxy CA and client certificate into dir
// and returns the kube-apiserver flags that use them. envtest leaves the
// aggregation layer out, and without it the manager's content API could
// not tell the API server from anyone else.
func frontProxyArgs(dir string) (map[string]string, error) {
	fp, err := pki.NewFrontProxy("front-proxy-ca", 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	ca, crt, key := filepath.Join(dir, "front-proxy-ca.crt"), filepath.Join(dir, "front-proxy-client.crt"), filepath.Join(dir, "front-proxy-client.key")
	for path, data := range map[string][]byte{ca: fp.CAPEM, crt: fp.CertPEM, key: fp.KeyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return pki.FrontProxyFlags(ca, crt, key), nil
}
