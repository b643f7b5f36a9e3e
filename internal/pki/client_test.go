package pki

import (
	"crypto/x509"
	"errors"
	"testing"
)

func TestClientTLS(t *testing.T) {
	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ClientTLS(nil, true)
	if err != nil || cfg.RootCAs != nil || !cfg.InsecureSkipVerify {
		t.Fatalf("no bundle, insecure: %+v, %v", cfg, err)
	}
	if _, err := ClientTLS([]byte("not pem"), false); !errors.Is(err, ErrNoPEM) {
		t.Fatalf("bad bundle: %v", err)
	}
	cfg, err = ClientTLS(ca.CertPEM, false)
	if err != nil || cfg.RootCAs == nil || cfg.InsecureSkipVerify {
		t.Fatalf("bundle: %+v, %v", cfg, err)
	}
	if _, err := ca.Cert.Verify(x509.VerifyOptions{Roots: cfg.RootCAs}); err != nil {
		t.Fatalf("the bundle's CA is not trusted: %v", err)
	}
}
