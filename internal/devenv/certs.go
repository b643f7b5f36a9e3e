package devenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
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

// frontProxyClientName is the common name the API server proxies as.
const frontProxyClientName = "front-proxy-client"

// ensureFrontProxy creates the front-proxy CA and client certificate when
// either is missing (state folders from before the content API lack them).
func (p pki) ensureFrontProxy() error {
	if fileExists(p.frontProxyCA()) && fileExists(p.frontProxyCert()) && fileExists(p.frontProxyKey()) {
		return nil
	}
	ca, err := fleetpki.NewCA("fleet-dev-front-proxy-ca")
	if err != nil {
		return err
	}
	crt, key, err := ca.Issue(fleetpki.Leaf{CommonName: frontProxyClientName, Client: true, Validity: 10 * 365 * 24 * time.Hour})
	if err != nil {
		return err
	}
	for path, data := range map[string][]byte{p.frontProxyCA(): ca.CertPEM, p.frontProxyCert(): crt, p.frontProxyKey(): key} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

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
	var caKey *ecdsa.PrivateKey
	var ca *x509.Certificate
	if fileExists(p.caCert()) && fileExists(p.caKey()) {
		var err error
		if ca, caKey, err = loadPair(p.caCert(), p.caKey()); err != nil {
			return err
		}
	} else {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber:          serial(),
			Subject:               pkix.Name{CommonName: "fleet-dev-ca"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().AddDate(10, 0, 0),
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return err
		}
		if ca, err = x509.ParseCertificate(der); err != nil {
			return err
		}
		caKey = key
		if err := writePair(p.caCert(), p.caKey(), der, key); err != nil {
			return err
		}
	}
	if !fileExists(p.servingCert()) {
		if err := issue(ca, caKey, p.servingCert(), p.servingKey(), &x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver"},
			DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			return err
		}
	}
	if !fileExists(p.adminCert()) {
		if err := issue(ca, caKey, p.adminCert(), p.adminKey(), &x509.Certificate{
			Subject:     pkix.Name{CommonName: "fleet-dev-admin", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
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

func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().AddDate(10, 0, 0)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return writePair(certPath, keyPath, der, key)
}

func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func loadPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		return nil, nil, errors.New("corrupt PEM in " + filepath.Dir(certPath) + "; run `fleet dev down` to start over")
	}
	cert, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certPath, err)
	}
	key, err := x509.ParseECPrivateKey(kblock.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	return cert, key, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
