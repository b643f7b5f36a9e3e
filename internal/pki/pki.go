// Package pki makes the small certificate authorities the project needs at
// run time: the serving certificate of the manager's content API (which the
// API server's aggregation layer verifies against the APIService caBundle)
// and, for the embedded control planes of tests and `fleet dev`, their
// cluster CA, serving and admin certificates and the front-proxy CA that
// lets kube-apiserver prove itself to that API.
package pki

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
	"time"
)

// CA is a self-signed certificate authority held in memory.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM is Cert, PEM encoded (what a caBundle or a CA file holds).
	CertPEM []byte
}

// NewCA creates a CA valid for ten years.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA parses a CA from PEM certificate and key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("pki: CA certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// KeyPEM is the CA's private key, PEM encoded.
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

// Leaf describes a certificate to issue.
type Leaf struct {
	CommonName string
	// Organization becomes the groups of a client certificate (such as
	// system:masters).
	Organization []string
	// DNSNames and IPs are the subject alternative names of a server
	// certificate.
	DNSNames []string
	IPs      []net.IP
	// Client issues a client certificate instead of a server one.
	Client bool
	// Validity defaults to one year.
	Validity time.Duration
}

// Issue signs a new key pair and returns certificate and key as PEM.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEMOut []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if l.Validity == 0 {
		l.Validity = 365 * 24 * time.Hour
	}
	usage := x509.ExtKeyUsageServerAuth
	if l.Client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.CommonName, Organization: l.Organization},
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(l.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// FrontProxyClientName is the common name of the certificate kube-apiserver
// presents to aggregated APIs (the manager's content API).
const FrontProxyClientName = "front-proxy-client"

// FrontProxy is the aggregation layer's material: the request-header CA and
// the client certificate kube-apiserver proxies with.
type FrontProxy struct {
	CAPEM, CertPEM, KeyPEM []byte
}

// NewFrontProxy creates a request-header CA and its client certificate.
func NewFrontProxy(caName string, validity time.Duration) (*FrontProxy, error) {
	ca, err := NewCA(caName)
	if err != nil {
		return nil, err
	}
	crt, key, err := ca.Issue(Leaf{CommonName: FrontProxyClientName, Client: true, Validity: validity})
	if err != nil {
		return nil, err
	}
	return &FrontProxy{CAPEM: ca.CertPEM, CertPEM: crt, KeyPEM: key}, nil
}

// FrontProxyFlags are the kube-apiserver flags (names without "--") that
// configure the aggregation layer the way kubeadm does, from the files of a
// FrontProxy. Without them an aggregated API cannot tell the API server
// from anyone else.
func FrontProxyFlags(caFile, certFile, keyFile string) map[string]string {
	return map[string]string{
		"requestheader-client-ca-file":       caFile,
		"requestheader-allowed-names":        FrontProxyClientName,
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             certFile,
		"proxy-client-key-file":              keyFile,
	}
}
