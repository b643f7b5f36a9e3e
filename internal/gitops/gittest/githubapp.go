package gittest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// GitHubApp makes an HTTPServer act as a GitHub Enterprise Server for one
// GitHub App installation: POST /api/v3/app/installations/<id>/access_tokens
// answers a JWT signed with the App's key (RS256, iss = the App ID, not
// expired) with a new installation token, and git requests must then
// authenticate as x-access-token with a token it issued.
type GitHubApp struct {
	AppID          int64
	InstallationID int64
	PublicKey      *rsa.PublicKey

	mu     sync.Mutex
	tokens map[string]bool
	issued int
}

// Issued is how many installation tokens were handed out.
func (a *GitHubApp) Issued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.issued
}

func (a *GitHubApp) validToken(user, password string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return user == "x-access-token" && a.tokens[password]
}

// serveToken handles the token endpoint; it reports false for other paths.
func (a *GitHubApp) serveToken(w http.ResponseWriter, r *http.Request) bool {
	const prefix = "/api/v3/app/installations/"
	if !strings.HasPrefix(r.URL.Path, prefix) || !strings.HasSuffix(r.URL.Path, "/access_tokens") {
		return false
	}
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
	}
	if r.Method != http.MethodPost {
		fail(http.StatusMethodNotAllowed, "POST only")
		return true
	}
	id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, prefix), "/access_tokens")
	if id != strconv.FormatInt(a.InstallationID, 10) {
		fail(http.StatusNotFound, "Not Found")
		return true
	}
	if err := a.verify(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")); err != nil {
		fail(http.StatusUnauthorized, "A JSON web token could not be decoded: "+err.Error())
		return true
	}
	raw := make([]byte, 16)
	_, _ = rand.Read(raw)
	token := "ghs_" + hex.EncodeToString(raw)
	a.mu.Lock()
	if a.tokens == nil {
		a.tokens = map[string]bool{}
	}
	a.tokens[token] = true
	a.issued++
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"token": token, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	return true
}

func (a *GitHubApp) verify(jwt string) error {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return fmt.Errorf("not a JWT")
	}
	enc := base64.RawURLEncoding
	sig, err := enc.DecodeString(parts[2])
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(a.PublicKey, crypto.SHA256, sum[:], sig); err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	var header struct{ Alg string }
	if b, err := enc.DecodeString(parts[0]); err != nil || json.Unmarshal(b, &header) != nil || header.Alg != "RS256" {
		return fmt.Errorf("header")
	}
	var claims struct {
		Iat, Exp int64
		Iss      string
	}
	b, err := enc.DecodeString(parts[1])
	if err != nil || json.Unmarshal(b, &claims) != nil {
		return fmt.Errorf("claims")
	}
	now := time.Now().Unix()
	switch {
	case claims.Iss != strconv.FormatInt(a.AppID, 10):
		return fmt.Errorf("iss %q", claims.Iss)
	case claims.Exp <= now || claims.Exp-claims.Iat > 600:
		return fmt.Errorf("expired or valid for more than 10 minutes")
	case claims.Iat > now+60:
		return fmt.Errorf("issued in the future")
	}
	return nil
}
