package git

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
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
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	allClosed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v3/app/installations/5678/access_tokens" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"token":"ghs_test","expires_at":"2099-01-01T00:00:00Z"}`))
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
			if len(open) == 0 {
				select {
				case allClosed <- struct{}{}:
				default:
				}
			}
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	// An App ID of its own: tokens are cached process-wide.
	app := &GitHubApp{AppID: 987001, InstallationID: 5678, PrivateKey: keyPEM, APIURL: srv.URL + "/api/v3"}
	tok, err := app.installationToken(context.Background(), Remote{URL: srv.URL + "/org/repo.git", CABundle: ca})
	if err != nil || tok != "ghs_test" {
		t.Fatalf("installationToken = %q, %v", tok, err)
	}

	mu.Lock()
	n := len(open)
	mu.Unlock()
	if n == 0 {
		return
	}
	// The client closed its end; the server notices when its read ends.
	// An idle connection would stay for the transport's 90 s, far beyond
	// this bound.
	select {
	case <-allClosed:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d connection(s) to the GitHub API still open after the token request", n)
	}
}
