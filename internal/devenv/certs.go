package devenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	fleetpki "github.com/fleetgo/fleet/internal/pki"
)

// pki is the certificate material of one control plane. It is created once
// and kept in the state folder: the serving CA is what agents trust and the
// service-account key signs their tokens, so both must survive a restart
// for registered agents to keep working.
type pki struct {
	dir string
}

func (p pki) caCert() string      { return filepath.Join(p.dir, "ca.crt") }
func (p pki) caKey() string       { return filepath.Join(p.dir, "ca.key") }
func (p pki) servingCert() string { return filepath.Join(p.dir, "apiserver.crt") }
func (p pki) servingKey() string  { return filepath.Join(p.dir, "apiserver.key") }
func (p pki) adminCert() string   { return filepath.Join(p.dir, "admin.crt") }
func (p pki) adminKey() string    { return filepath.Join(p.dir, "admin.key") }
func (p pki) saKey() string       { return filepath.Join(p.dir, "sa.key") }

// The aggregation layer's request-header CA and the client certificate
// kube-apiserver proxies with (the manager's content API trusts it).
func (p pki) frontProxyCA() string   { return filepath.Join(p.dir, "front-proxy-ca.crt") }
func (p pki) frontProxyCert() string { return filepath.Join(p.dir, "front-proxy-client.crt") }
func (p pki) frontProxyKey() string  { return filepath.Join(p.dir, "front-proxy-client.key") }

// ensureFrontProxy creates the front-proxy CA and client certificate when
// either is missing (state folders from before the content API lack them).
func (p pki) ensureFrontProxy() error {
	if fileExists(p.frontProxyCA()) && fileExists(p.frontProxyCert()) && fileExists(p.frontProxyKey()) {
		return nil
	}
	fp, err := fleetpki.NewFrontProxy("fleet-dev-front-proxy-ca", certValidity)
	if err != nil {
		return err
	}
	for path, data := range map[string][]byte{p.frontProxyCA(): fp.CAPEM, p.frontProxyCert(): fp.CertPEM, p.frontProxyKey(): fp.KeyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// frontProxyArgs are kube-apiserver's aggregation-layer flags.
func (p pki) frontProxyArgs() []string {
	flags := fleetpki.FrontProxyFlags(p.frontProxyCA(), p.frontProxyCert(), p.frontProxyKey())
	args := make([]string, 0, len(flags))
	for _, k := range slices.Sorted(maps.Keys(flags)) {
		args = append(args, "--"+k+"="+flags[k])
	}
	return args
}

// certValidity is the lifetime of the embedded control plane's certificates.
const certValidity = 10 * 365 * 24 * time.Hour

// ensure creates whatever is missing. A partial set (a crash while writing)
// is recreated from scratch only when the CA itself is missing.
func (p pki) ensure() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	if err := p.ensureFrontProxy(); err != nil {
		return err
	}
	if fileExists(p.caCert()) && fileExists(p.caKey()) && fileExists(p.servingCert()) &&
		fileExists(p.adminCert()) && fileExists(p.saKey()) {
		return nil
	}
	var ca *fleetpki.CA
	var err error
	if fileExists(p.caCert()) && fileExists(p.caKey()) {
		if ca, err = p.loadCA(); err != nil {
			return err
		}
	} else {
		if ca, err = fleetpki.NewCA("fleet-dev-ca"); err != nil {
			return err
		}
		key, err := ca.KeyPEM()
		if err != nil {
			return err
		}
		if err := writePair(p.caCert(), p.caKey(), ca.CertPEM, key); err != nil {
			return err
		}
	}
	if !fileExists(p.servingCert()) {
		if err := issue(ca, p.servingCert(), p.servingKey(), fleetpki.Leaf{
			CommonName: "kube-apiserver",
			DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
			IPs:        []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		}); err != nil {
			return err
		}
	}
	if !fileExists(p.adminCert()) {
		if err := issue(ca, p.adminCert(), p.adminKey(), fleetpki.Leaf{
			CommonName: "fleet-dev-admin", Organization: []string{"system:masters"}, Client: true,
		}); err != nil {
			return err
		}
	}
	if !fileExists(p.saKey()) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := os.WriteFile(p.saKey(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// issue signs a certificate valid for certValidity and writes it.
func issue(ca *fleetpki.CA, certPath, keyPath string, l fleetpki.Leaf) error {
	l.Validity = certValidity
	crt, key, err := ca.Issue(l)
	if err != nil {
		return err
	}
	return writePair(certPath, keyPath, crt, key)
}

func writePair(certPath, keyPath string, certPEM, keyPEM []byte) error {
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(certPath, certPEM, 0o644)
}

func (p pki) loadCA() (*fleetpki.CA, error) {
	cb, err := os.ReadFile(p.caCert())
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(p.caKey())
	if err != nil {
		return nil, err
	}
	ca, err := fleetpki.LoadCA(cb, kb)
	if err != nil {
		return nil, fmt.Errorf("%w in %s; run `bin/fleet dev down` to start over", err, p.dir)
	}
	return ca, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
