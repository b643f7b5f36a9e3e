package git

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleetgo/fleet/internal/testenv/conntrack"
)

// TestGitHubAppTokenRequestLeavesNoIdleConnection: the token request's
// client is made for that request alone, so its connection is closed once
// the answer is read, instead of idling (a socket and two goroutines) for
// the transport's idle timeout after every token refresh.
func TestGitHubAppTokenRequestLeavesNoIdleConnection(t *testing.T) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v3/app/installations/5678/access_tokens" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"token":"ghs_test","expires_at":"2099-01-01T00:00:00Z"}`))
	}))
	conns := conntrack.Track(srv)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	// An App ID of its own: tokens are cached process-wide.
	app := &GitHubApp{AppID: 987001, InstallationID: 5678, PrivateKey: keyPEM, APIURL: srv.URL + "/api/v3"}
	tok, err := app.installationToken(context.Background(), Remote{URL: srv.URL + "/org/repo.git", CABundle: ca})
	if err != nil || tok != "ghs_test" {
		t.Fatalf("installationToken = %q, %v", tok, err)
	}

	conns.WaitClosed(t, 20*time.Second, "the GitHub API after the token request")
}
