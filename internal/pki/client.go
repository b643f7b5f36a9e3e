package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// ErrNoPEM means a CA bundle holds no PEM certificate.
var ErrNoPEM = errors.New("CA bundle contains no PEM certificates")

// ClientTLS is the TLS configuration of a client that trusts the system
// roots plus caBundle (when set), or, with insecure, any server: what a
// user's caBundle and insecureSkipTLS settings ask for.
func ClientTLS(caBundle []byte, insecure bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // the user asked for it
	if len(caBundle) == 0 {
		return cfg, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(caBundle) {
		return nil, ErrNoPEM
	}
	cfg.RootCAs = pool
	return cfg, nil
}
