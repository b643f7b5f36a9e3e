// Package register is the agent side of cluster registration: it turns the
// fleet-agent-bootstrap Secret (a registration token) into the cluster's own
// credential, stores that in Secret fleet-agent, forgets the token, and
// renews the credential before it expires.
package register

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Keys of the agent's Secret fleet-agent (Fleet's names).
const (
	KeyKubeconfig          = "kubeconfig"
	KeyDeploymentNamespace = "deploymentNamespace"
	KeyClusterNamespace    = "clusterNamespace"
	KeyClusterName         = "clusterName"
)

// Names of the agent's objects in its own (downstream) namespace.
const (
	AgentSecretName     = "fleet-agent"
	BootstrapSecretName = "fleet-agent-bootstrap"
	ConfigMapName       = "fleet-agent"
)

// Credential is the cluster's own upstream credential.
type Credential struct {
	// Host and CA locate the manager's API server.
	Host string
	CA   []byte
	// DeploymentNamespace is the cluster namespace upstream (where its
	// BundleDeployments are); ClusterNamespace is the workspace of the
	// Cluster; ClusterName its name.
	DeploymentNamespace string
	ClusterNamespace    string
	ClusterName         string

	token *tokenHolder
	// handover deletes the registration secret (set by Register).
	handover func(context.Context) error
}

// tokenHolder lets a renewed token replace the old one under running
// clients: every request reads the current token.
type tokenHolder struct{ v atomic.Pointer[string] }

// ReleaseHandover deletes the registration (hand-over) secret once the
// credential is stored, so that the manager can mark the registration
// delivered and stop looking at it. The manager removes it after a while if
// this fails, so a failure is only worth a log line.
func (c *Credential) ReleaseHandover(ctx context.Context) error {
	if c.handover == nil {
		return nil
	}
	if err := c.handover(ctx); err != nil {
		return err
	}
	c.handover = nil
	return nil
}

func (h *tokenHolder) get() string  { return *h.v.Load() }
func (h *tokenHolder) set(t string) { h.v.Store(&t) }

// Token returns the current bearer token (never log it).
func (c *Credential) Token() string { return c.token.get() }

// SetToken replaces the token used by every client built from RESTConfig.
func (c *Credential) SetToken(t string) { c.token.set(t) }

// RESTConfig is a config whose requests always carry the current token.
func (c *Credential) RESTConfig() *rest.Config {
	h := c.token
	return &rest.Config{
		Host:            c.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CA},
		QPS:             50, Burst: 100,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				req = req.Clone(req.Context())
				req.Header.Set("Authorization", "Bearer "+h.get())
				return rt.RoundTrip(req)
			})
		},
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func newCredential(host string, ca []byte, token string) *Credential {
	c := &Credential{Host: host, CA: ca, token: &tokenHolder{}}
	c.token.set(token)
	return c
}

// Kubeconfig renders the credential as a kubeconfig whose namespace is the
// cluster namespace.
func (c *Credential) Kubeconfig() ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cluster"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CA}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: c.Token()}
	kc.Contexts["default"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "user", Namespace: c.DeploymentNamespace}
	kc.CurrentContext = "default"
	return clientcmd.Write(*kc)
}

// credentialFromSecret reads Secret fleet-agent's data.
func credentialFromSecret(data map[string][]byte) (*Credential, error) {
	kc, err := clientcmd.Load(data[KeyKubeconfig])
	if err != nil {
		return nil, errors.New("secret fleet-agent: key kubeconfig is not a valid kubeconfig")
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if ctx == nil || kc.Clusters[ctx.Cluster] == nil || kc.AuthInfos[ctx.AuthInfo] == nil || kc.AuthInfos[ctx.AuthInfo].Token == "" {
		return nil, errors.New("secret fleet-agent: kubeconfig has no current context with a token")
	}
	cl := kc.Clusters[ctx.Cluster]
	c := newCredential(cl.Server, cl.CertificateAuthorityData, kc.AuthInfos[ctx.AuthInfo].Token)
	c.DeploymentNamespace = string(data[KeyDeploymentNamespace])
	c.ClusterNamespace = string(data[KeyClusterNamespace])
	c.ClusterName = string(data[KeyClusterName])
	if c.DeploymentNamespace == "" {
		c.DeploymentNamespace = ctx.Namespace
	}
	if c.DeploymentNamespace == "" || c.ClusterNamespace == "" || c.ClusterName == "" {
		return nil, errors.New("secret fleet-agent: deploymentNamespace, clusterNamespace and clusterName are required")
	}
	return c, nil
}

func (c *Credential) secretData() (map[string][]byte, error) {
	kc, err := c.Kubeconfig()
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		KeyKubeconfig:          kc,
		KeyDeploymentNamespace: []byte(c.DeploymentNamespace),
		KeyClusterNamespace:    []byte(c.ClusterNamespace),
		KeyClusterName:         []byte(c.ClusterName),
	}, nil
}

// claims are the parts of a ServiceAccount token the agent needs. The token
// is not verified here (the API server does that); it is only read to know
// when to renew and which ServiceAccount to renew.
type claims struct {
	Exp int64  `json:"exp"`
	Iat int64  `json:"iat"`
	Sub string `json:"sub"`
}

// TokenInfo is what the agent reads from its token.
type TokenInfo struct {
	IssuedAt, Expires time.Time
	// ServiceAccount and Namespace name the token's ServiceAccount.
	ServiceAccount, Namespace string
}

// ParseToken reads the claims of a JWT without verifying it.
func ParseToken(token string) (TokenInfo, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return TokenInfo{}, errors.New("token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return TokenInfo{}, fmt.Errorf("token payload: %w", err)
	}
	var cl claims
	if err := json.Unmarshal(payload, &cl); err != nil {
		return TokenInfo{}, fmt.Errorf("token claims: %w", err)
	}
	info := TokenInfo{IssuedAt: time.Unix(cl.Iat, 0), Expires: time.Unix(cl.Exp, 0)}
	if s, ok := strings.CutPrefix(cl.Sub, "system:serviceaccount:"); ok {
		if ns, name, ok := strings.Cut(s, ":"); ok {
			info.Namespace, info.ServiceAccount = ns, name
		}
	}
	if cl.Exp == 0 || info.ServiceAccount == "" {
		return info, errors.New("token has no expiry or is not a ServiceAccount token")
	}
	return info, nil
}
