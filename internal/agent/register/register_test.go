package register

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseBootstrap(t *testing.T) {
	full := map[string][]byte{"apiServerURL": []byte("https://x"), "token": []byte("t"), "tokenName": []byte("n"), "clusterNamespace": []byte("ws")}
	b, err := ParseBootstrap(full)
	if err != nil || b.SystemRegistrationNamespace != "cattle-fleet-clusters-system" {
		t.Fatalf("full: %v %+v", err, b)
	}
	_, err = ParseBootstrap(map[string][]byte{"token": []byte("secret-value")})
	if err == nil || !strings.Contains(err.Error(), "apiServerURL") || strings.Contains(err.Error(), "secret-value") {
		t.Errorf("missing keys: %v", err)
	}
}

func jwt(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(payload)) + ".sig"
}

func TestParseToken(t *testing.T) {
	info, err := ParseToken(jwt(`{"exp":2000,"iat":1000,"sub":"system:serviceaccount:cluster-ns:request-x-uid"}`))
	if err != nil {
		t.Fatal(err)
	}
	if info.Namespace != "cluster-ns" || info.ServiceAccount != "request-x-uid" || !info.Expires.Equal(time.Unix(2000, 0)) || !info.IssuedAt.Equal(time.Unix(1000, 0)) {
		t.Errorf("info %+v", info)
	}
	for _, bad := range []string{"", "a.b", jwt(`{"exp":1}`), jwt(`not json`), "a.!!!.c"} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("ParseToken(%q) accepted", bad)
		}
	}
}

func TestCredentialRoundTrip(t *testing.T) {
	c := newCredential("https://up", []byte("ca"), jwt(`{"exp":2}`))
	c.DeploymentNamespace, c.ClusterNamespace, c.ClusterName = "cluster-ns", "ws", "c1"
	data, err := c.secretData()
	if err != nil {
		t.Fatal(err)
	}
	back, err := credentialFromSecret(data)
	if err != nil {
		t.Fatal(err)
	}
	if back.Host != c.Host || back.Token() != c.Token() || back.DeploymentNamespace != "cluster-ns" || back.ClusterName != "c1" || back.ClusterNamespace != "ws" {
		t.Errorf("round trip: %+v", back)
	}
	if _, err := credentialFromSecret(map[string][]byte{"kubeconfig": []byte("garbage: [")}); err == nil {
		t.Error("garbled kubeconfig accepted")
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add(jwt(`{"exp":2000,"iat":1000,"sub":"system:serviceaccount:a:b"}`))
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseToken(s)
	})
}

func TestTrustedCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ctx := context.Background()
	// The test server is not in the system store: both modes use the CA.
	for _, mode := range []string{"", "system-store", "strict"} {
		if got := TrustedCA(ctx, srv.URL, ca, mode); string(got) != string(ca) {
			t.Errorf("mode %q: got %q, want the given CA", mode, got)
		}
	}
	if got := TrustedCA(ctx, srv.URL, nil, "system-store"); got != nil {
		t.Errorf("no CA given: got %q", got)
	}
}
