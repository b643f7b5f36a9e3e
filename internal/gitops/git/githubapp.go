package git

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetgo/fleet/internal/pki"
)

// Keys of a client Secret holding GitHub App credentials, as in Fleet.
const (
	KeyGitHubAppID             = "github_app_id"
	KeyGitHubAppInstallationID = "github_app_installation_id"
	KeyGitHubAppPrivateKey     = "github_app_private_key"
	// KeyGitHubAppAPIURL (optional, not a Rancher key) is the REST API of
	// a GitHub Enterprise Server, https://<host>/api/v3. Without it App
	// credentials are used for github.com repositories only.
	KeyGitHubAppAPIURL = "github_app_api_url"
)

// gitHubAPI is GitHub.com's REST API, the only place an App's JWT goes
// unless the Secret names a GitHub Enterprise Server API.
const gitHubAPI = "https://api.github.com"

// GitHubApp authenticates HTTPS git access as an installation of a GitHub
// App: the manager signs a short JWT with the App's private key, exchanges
// it for an installation access token (valid for an hour) and uses that as
// the password of user x-access-token. Tokens are cached until five
// minutes before they expire.
type GitHubApp struct {
	AppID          int64
	InstallationID int64
	// PrivateKey is the App's PEM private key (PKCS#1 or PKCS#8 RSA).
	PrivateKey []byte
	// APIURL is the GitHub Enterprise Server API the Secret names
	// (KeyGitHubAppAPIURL); empty means api.github.com.
	APIURL string
}

// gitHubAPIURL is where the App's JWT may be sent for a repository. The
// JWT is signed with the App's key and valid for every installation of the
// App, so it never goes to a host derived from the repo URL alone (anyone
// who can write a GitRepo chooses that URL): it goes to api.github.com for
// a github.com repository, or to the API the Secret names explicitly, and
// then only when that API is the repository's own host (GitHub Enterprise
// Server: https://<host>/api/v3) or its api. subdomain (GitHub Enterprise
// Cloud with data residency), so that the installation token is not
// handed to another host either. custom reports an explicit API.
func gitHubAPIURL(repoURL, configured string) (api string, custom bool, err error) {
	u, err := url.Parse(repoURL)
	if err != nil || u.Host == "" || u.Scheme != "https" {
		return "", false, fmt.Errorf("%w: GitHub App credentials need an https repo URL", ErrBadCredentials)
	}
	repoHost := strings.ToLower(u.Host)
	if configured == "" {
		if h := strings.ToLower(u.Hostname()); (h == "github.com" || h == "www.github.com") && u.Port() == "" {
			return gitHubAPI, false, nil
		}
		return "", false, fmt.Errorf("%w: GitHub App credentials are only used for github.com repositories, not %s; for GitHub Enterprise Server add %s (https://<host>/api/v3) to the Secret",
			ErrBadCredentials, repoHost, KeyGitHubAppAPIURL)
	}
	a, err := url.Parse(strings.TrimSpace(configured))
	if err != nil || a.Scheme != "https" || a.Host == "" || a.User != nil || a.RawQuery != "" || a.Fragment != "" {
		return "", false, fmt.Errorf("%w: %s must be an https URL without credentials", ErrBadCredentials, KeyGitHubAppAPIURL)
	}
	apiHost := strings.ToLower(a.Host)
	if apiHost != repoHost && apiHost != "api."+repoHost {
		return "", false, fmt.Errorf("%w: %s is on host %s, which does not serve repositories of %s", ErrBadCredentials, KeyGitHubAppAPIURL, apiHost, repoHost)
	}
	return strings.TrimRight(a.Scheme+"://"+a.Host+a.EscapedPath(), "/"), true, nil
}

type appToken struct {
	token   string
	refresh time.Time
}

var appTokens sync.Map // tokenKey -> appToken

type tokenKey struct {
	api          string
	app, install int64
	keyHash      [32]byte
}

// installationToken returns a cached or new installation token.
func (a *GitHubApp) installationToken(ctx context.Context, r Remote) (string, error) {
	api, custom, err := gitHubAPIURL(r.URL, a.APIURL)
	if err != nil {
		return "", err
	}
	key := tokenKey{api: api, app: a.AppID, install: a.InstallationID, keyHash: sha256.Sum256(a.PrivateKey)}
	if v, ok := appTokens.Load(key); ok && time.Now().Before(v.(appToken).refresh) {
		return v.(appToken).token, nil
	}
	signer, err := parseRSAKey(a.PrivateKey)
	if err != nil {
		return "", err
	}
	jwt, err := appJWT(a.AppID, signer, time.Now())
	if err != nil {
		return "", err
	}
	endpoint := fmt.Sprintf("%s/app/installations/%d/access_tokens", api, a.InstallationID)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+jwt)
	req.Header.Set("Accept", "application/vnd.github+json")
	hc, err := apiClient(r, custom)
	if err != nil {
		return "", err
	}
	// The client is this request's alone: its connection would otherwise
	// idle, never reused, for the transport's idle timeout (a socket and
	// two goroutines per token refresh). Deferred first, so it runs after
	// the body is closed and the connection is idle.
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("GitHub App installation token from %s: %w", api, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		var msg struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(body, &msg)
		err := fmt.Errorf("GitHub App %d installation %d: token request to %s answered %s: %s", a.AppID, a.InstallationID, api, resp.Status, msg.Message)
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusForbidden {
			return "", fmt.Errorf("%w: %w", ErrBadCredentials, err)
		}
		return "", err
	}
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Token == "" {
		return "", fmt.Errorf("GitHub App installation token from %s: unexpected answer", api)
	}
	refresh := out.ExpiresAt.Add(-5 * time.Minute)
	if out.ExpiresAt.IsZero() {
		refresh = time.Now().Add(30 * time.Minute)
	}
	appTokens.Store(key, appToken{token: out.Token, refresh: refresh})
	return out.Token, nil
}

// apiClient reaches a GitHub Enterprise Server API with the repository's
// TLS settings (it serves both from one host), and api.github.com with the
// system roots only: a GitRepo's caBundle or insecureSkipTLSVerify must not
// let anyone in the path read the JWT.
func apiClient(r Remote, custom bool) (*http.Client, error) {
	ca, insecure := r.CABundle, r.InsecureSkipTLS
	if !custom {
		ca, insecure = nil, false
	}
	tlsCfg, err := pki.ClientTLS(ca, insecure)
	if err != nil {
		return nil, fmt.Errorf("%w: caBundle: %w", ErrBadCredentials, err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	return &http.Client{Transport: tr, Timeout: r.timeout()}, nil
}

func parseRSAKey(p []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(p)
	if block == nil {
		return nil, fmt.Errorf("%w: %s is not PEM", ErrBadCredentials, KeyGitHubAppPrivateKey)
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: parsing %s: %v", ErrBadCredentials, KeyGitHubAppPrivateKey, err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not an RSA key", ErrBadCredentials, KeyGitHubAppPrivateKey)
	}
	return rk, nil
}

// appJWT is the RS256 JWT GitHub asks an App to sign: issued a minute in
// the past (clock drift), valid for nine minutes (at most ten).
func appJWT(appID int64, k *rsa.PrivateKey, now time.Time) (string, error) {
	enc := base64.RawURLEncoding
	header := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	claims, err := json.Marshal(map[string]any{
		"iat": now.Add(-time.Minute).Unix(),
		"exp": now.Add(9 * time.Minute).Unix(),
		"iss": strconv.FormatInt(appID, 10),
	})
	if err != nil {
		return "", err
	}
	signed := header + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(nil, k, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return signed + "." + enc.EncodeToString(sig), nil
}

// gitHubAppFromSecret reads the App keys of a client Secret; nil when it
// has none, an error when they are incomplete or not numbers.
func gitHubAppFromSecret(data map[string][]byte) (*GitHubApp, error) {
	id, inst, key := data[KeyGitHubAppID], data[KeyGitHubAppInstallationID], data[KeyGitHubAppPrivateKey]
	if len(id) == 0 && len(inst) == 0 && len(key) == 0 {
		return nil, nil
	}
	if len(id) == 0 || len(inst) == 0 || len(key) == 0 {
		return nil, fmt.Errorf("%w: GitHub App credentials need %s, %s and %s", ErrBadCredentials, KeyGitHubAppID, KeyGitHubAppInstallationID, KeyGitHubAppPrivateKey)
	}
	appID, err := strconv.ParseInt(strings.TrimSpace(string(id)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a number", ErrBadCredentials, KeyGitHubAppID)
	}
	installID, err := strconv.ParseInt(strings.TrimSpace(string(inst)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a number", ErrBadCredentials, KeyGitHubAppInstallationID)
	}
	return &GitHubApp{AppID: appID, InstallationID: installID, PrivateKey: key, APIURL: strings.TrimSpace(string(data[KeyGitHubAppAPIURL]))}, nil
}
