package testenv

import (
	"os"
	"path/filepath"

	"github.com/fleetgo/fleet/internal/pki"
)

// FrontProxyClientName is the common name of the certificate the API
// server presents to aggregated APIs (the manager's content API).
const FrontProxyClientName = "front-proxy-client"

// frontProxyArgs configures the aggregation layer the way kubeadm does: a
// request-header CA, the client certificate the API server proxies with,
// and the headers that carry the user. envtest leaves it out, and without
// it the manager's content API could not tell the API server from anyone
// else.
func frontProxyArgs(dir string) (map[string]string, error) {
	ca, err := pki.NewCA("front-proxy-ca")
	if err != nil {
		return nil, err
	}
	crt, key, err := ca.Issue(pki.Leaf{CommonName: FrontProxyClientName, Client: true})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"front-proxy-ca.crt": ca.CertPEM, "front-proxy-client.crt": crt, "front-proxy-client.key": key}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return map[string]string{
		"requestheader-client-ca-file":       filepath.Join(dir, "front-proxy-ca.crt"),
		"requestheader-allowed-names":        FrontProxyClientName,
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             filepath.Join(dir, "front-proxy-client.crt"),
		"proxy-client-key-file":              filepath.Join(dir, "front-proxy-client.key"),
	}, nil
}
