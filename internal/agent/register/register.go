package register

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/scheme"
)

// ErrNoBootstrap means there is neither a usable stored credential nor a
// bootstrap Secret: the agent waits for a new fleet-agent-bootstrap.
var ErrNoBootstrap = errors.New("no usable credential and no fleet-agent-bootstrap secret; waiting for a new registration token")

// ErrRefused means the manager refused a credential (401/403).
var ErrRefused = errors.New("credential refused by the manager")

// Options configure registration.
type Options struct {
	// Downstream is a client of the cluster the agent runs in.
	Downstream client.Client
	// Namespace is the agent namespace (downstream).
	Namespace string
	// PollInterval is the first wait between checks for the credential
	// (default 2s); it doubles each time, with jitter, up to 10x or
	// MaxPollWait, whichever is shorter.
	PollInterval time.Duration
	// Timeout bounds the wait for a registration to be granted (30m).
	Timeout time.Duration
	// ClientRandom is the registration's random value (NewClientRandom);
	// empty means a new one. A caller that retries a failed registration
	// passes the same value each time, so that a retry picks up the
	// earlier attempt's ClusterRegistration (the name derives from it) and
	// hand-over Secret instead of filing a new request the manager would
	// grant as well: in a burst of thousands of agents, abandoned requests
	// otherwise multiply the manager's work exactly when it is behind.
	// Use a new value after a success or a refused token.
	ClientRandom string
}

// NewClientRandom returns a new random value for Options.ClientRandom.
func NewClientRandom() string { return randomHex(32) }

// registrationName is the ClusterRegistration of one (random, clientID):
// retries of one registration find their own request. The random value
// comes first: KeyHash reads only the first 100 bytes.
func registrationName(clientID, random string) string {
	return "request-" + names.KeyHash(random + "/" + clientID)[:10]
}

// MaxPollWait caps the wait between two checks for a granted credential.
// In a registration burst the grant of the last clusters comes late; a
// short cap keeps their agents from sleeping long after it (a check that
// is not granted yet is a 403, answered from the API server's memory).
const MaxPollWait = 5 * time.Second

func (o *Options) defaults() {
	if o.PollInterval == 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Minute
	}
}

// Bootstrap is the content of Secret fleet-agent-bootstrap.
type Bootstrap struct {
	APIServerURL                string
	APIServerCA                 []byte
	Token                       string
	TokenName                   string
	ClusterNamespace            string
	SystemRegistrationNamespace string
}

// ParseBootstrap validates the bootstrap Secret's data; the error names the
// missing keys, never their values.
func ParseBootstrap(data map[string][]byte) (*Bootstrap, error) {
	b := &Bootstrap{
		APIServerURL:                string(data["apiServerURL"]),
		APIServerCA:                 data["apiServerCA"],
		Token:                       string(data["token"]),
		TokenName:                   string(data["tokenName"]),
		ClusterNamespace:            string(data["clusterNamespace"]),
		SystemRegistrationNamespace: string(data["systemRegistrationNamespace"]),
	}
	var missing []string
	for k, v := range map[string]string{"apiServerURL": b.APIServerURL, "token": b.Token, "tokenName": b.TokenName, "clusterNamespace": b.ClusterNamespace} {
		if v == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("secret %s is missing keys %v", BootstrapSecretName, sortStrings(missing))
	}
	if b.SystemRegistrationNamespace == "" {
		b.SystemRegistrationNamespace = fleet.DefaultSystemRegistrationNamespace
	}
	return b, nil
}

// AgentConfig is the JSON of ConfigMap fleet-agent, key "config".
type AgentConfig struct {
	Labels       map[string]string `json:"labels,omitempty"`
	ClientID     string            `json:"clientID,omitempty"`
	AgentTLSMode string            `json:"agentTLSMode,omitempty"`
	// GarbageCollectionInterval is read by GCInterval (a Go duration).
	GarbageCollectionInterval string `json:"garbageCollectionInterval,omitempty"`
}

// LoadConfig reads ConfigMap fleet-agent; a missing ConfigMap is an empty
// config.
func LoadConfig(ctx context.Context, c client.Reader, ns string) (AgentConfig, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ConfigMapName}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return AgentConfig{}, nil
		}
		return AgentConfig{}, err
	}
	return decodeConfig(cm)
}

// decodeConfig is the AgentConfig of ConfigMap fleet-agent's key "config";
// a ConfigMap without it is an empty config.
func decodeConfig(cm *corev1.ConfigMap) (AgentConfig, error) {
	var cfg AgentConfig
	if s := cm.Data["config"]; s != "" {
		if err := json.Unmarshal([]byte(s), &cfg); err != nil {
			return cfg, fmt.Errorf("configmap %s: key config is not valid JSON: %w", ConfigMapName, err)
		}
	}
	return cfg, nil
}

// Get returns the cluster's credential. A stored one the manager accepts
// is used, unless the bootstrap Secret next to it names another manager
// endpoint or workspace (see useStored); one it refuses, or cannot be
// reached with while a bootstrap Secret exists, is replaced by a new one
// from the bootstrap Secret, which is then deleted. It does one attempt;
// the caller retries with backoff.
func Get(ctx context.Context, opts Options) (*Credential, error) {
	opts.defaults()
	l := log.FromContext(ctx)
	stored, err := loadStored(ctx, opts)
	if err != nil {
		l.Info("ignoring stored credential", "reason", err.Error())
	}
	if stored != nil {
		if cred, done, err := useStored(ctx, opts, stored); done {
			return cred, err
		}
	}
	secret, b, err := readBootstrap(ctx, opts)
	switch {
	case err != nil:
		return nil, err
	case secret == nil:
		return nil, ErrNoBootstrap
	}
	cfg, err := LoadConfig(ctx, opts.Downstream, opts.Namespace)
	if err != nil {
		return nil, err
	}
	return registerWith(ctx, opts, secret, b, cfg)
}

// readBootstrap reads and parses Secret fleet-agent-bootstrap; all nil
// when there is none.
func readBootstrap(ctx context.Context, opts Options) (*corev1.Secret, *Bootstrap, error) {
	secret := &corev1.Secret{}
	if err := opts.Downstream.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: BootstrapSecretName}, secret); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	b, err := ParseBootstrap(secret.Data)
	if err != nil {
		return nil, nil, err
	}
	return secret, b, nil
}

// registerWith registers with bootstrap b (read from secret), stores the
// new credential in place of any other and deletes secret.
func registerWith(ctx context.Context, opts Options, secret *corev1.Secret, b *Bootstrap, cfg AgentConfig) (*Credential, error) {
	l := log.FromContext(ctx)
	cred, err := Register(ctx, opts, b, cfg)
	if err != nil {
		return nil, err
	}
	if err := Store(ctx, opts.Downstream, opts.Namespace, cred); err != nil {
		return nil, err
	}
	// The hand-over secret is no longer needed; the manager removes it
	// after a while if this fails.
	if err := cred.ReleaseHandover(ctx); err != nil {
		l.Info("could not delete the registration secret; the manager will", "error", err.Error())
	}
	// Forget the registration token: only the cluster's own credential
	// stays. A bootstrap Secret changed since it was read is left for
	// the next start to look at.
	err = opts.Downstream.Delete(ctx, secret, client.Preconditions{UID: &secret.UID, ResourceVersion: &secret.ResourceVersion})
	switch {
	case apierrors.IsConflict(err):
		l.Info("the bootstrap secret changed while registering; leaving it for the next start", "secret", BootstrapSecretName)
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("deleting %s: %w", BootstrapSecretName, err)
	}
	l.Info("registered", "cluster", cred.ClusterName, "workspace", cred.ClusterNamespace, "clusterNamespace", cred.DeploymentNamespace,
		"apiServerURL", cred.Host)
	return cred, nil
}

func loadStored(ctx context.Context, opts Options) (*Credential, error) {
	s := &corev1.Secret{}
	if err := opts.Downstream.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: AgentSecretName}, s); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return credentialFromSecret(s.Data)
}

// Check lists (at most one) BundleDeployment in the cluster namespace with
// the credential; 401/403 is ErrRefused. It gives up after requestTimeout:
// an address that no longer answers at all (a load balancer removed with
// the old manager) must not hold the agent's start forever.
func Check(ctx context.Context, cred *Credential) error {
	c, err := upstreamClient(cred.RESTConfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	err = c.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(cred.DeploymentNamespace), client.Limit(1))
	return classify(err)
}

func classify(err error) error {
	if err != nil && (apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)) {
		return fmt.Errorf("%w: %s", ErrRefused, apierrors.ReasonForError(err))
	}
	return err
}

// Register creates a ClusterRegistration with the bootstrap token and waits
// for the manager to hand over the cluster's credential.
func Register(ctx context.Context, opts Options, b *Bootstrap, cfg AgentConfig) (*Credential, error) {
	if opts.ClientRandom == "" {
		opts.ClientRandom = NewClientRandom()
	}
	cred, err := register(ctx, opts, b, cfg)
	if err == nil || errors.Is(err, ErrRefused) {
		// The request is done with: the next one is a new request.
		forgetHandover(opts.ClientRandom)
	}
	// What this process sent is not forgotten, even after a success: a
	// caller may retry with the same value (after a time-out that may have
	// filed the request, or a success it did not see), and AlreadyExists
	// is then its own request, not another agent's. It is one short
	// string per request this process made.
	return cred, err
}

// Requests this process filed, per clientRandom: sent holds the values
// whose registration this process has tried to create (a create that
// timed out may have succeeded), renamed the caller's value (Options.
// ClientRandom) replaced by a new one because another request held its
// name (see requestRandom).
var sent, renamed sync.Map

// requestRandom is the random value of the request for the caller's
// value random (itself, unless its name was taken by another request).
func requestRandom(random string) string {
	if r, ok := renamed.Load(random); ok {
		return r.(string)
	}
	return random
}

// createRequest creates reg, the request of the caller's value random.
// AlreadyExists is an earlier attempt's request, which still counts, when
// this process sent one for the value; otherwise another agent's request
// holds the name (a hash of 40 bits) and this one would wait for, and be
// handed, that agent's credential. The registration token may not read
// registrations, so that is all the agent can tell: the request takes a
// new random value, and so a new name, which later attempts of the
// caller's value continue.
func createRequest(ctx context.Context, up client.Client, reg *fleet.ClusterRegistration, random string) error {
	for range 3 {
		_, sentBefore := sent.LoadOrStore(reg.Spec.ClientRandom, struct{}{})
		err := up.Create(ctx, reg)
		switch {
		case err == nil || apierrors.IsAlreadyExists(err) && sentBefore:
			return nil
		case !apierrors.IsAlreadyExists(err):
			return err
		}
		sent.Delete(reg.Spec.ClientRandom)
		log.FromContext(ctx).Info("the registration name is taken by another agent's request; filing this one under a new name", "registration", reg.Name)
		next := NewClientRandom()
		renamed.Store(random, next)
		reg.Spec.ClientRandom = next
		reg.Name = registrationName(reg.Spec.ClientID, next)
	}
	return fmt.Errorf("registration names in %s are taken by other agents' requests", reg.Namespace)
}

func register(ctx context.Context, opts Options, b *Bootstrap, cfg AgentConfig) (*Credential, error) {
	opts.defaults()
	l := log.FromContext(ctx)
	clientID := cfg.ClientID
	if clientID == "" {
		ns := &corev1.Namespace{}
		if err := opts.Downstream.Get(ctx, client.ObjectKey{Name: "kube-system"}, ns); err != nil {
			return nil, fmt.Errorf("reading kube-system namespace for the cluster identity: %w", err)
		}
		clientID = string(ns.UID)
	}
	ca := TrustedCA(ctx, b.APIServerURL, b.APIServerCA, cfg.AgentTLSMode)
	importCfg := &rest.Config{Host: b.APIServerURL, TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		BearerToken: b.Token, Timeout: requestTimeout}
	up, err := upstreamClient(importCfg)
	if err != nil {
		return nil, fmt.Errorf("building the manager client: %w", err)
	}
	labels := map[string]string{}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	if pod := os.Getenv("POD_NAME"); pod != "" {
		labels[fleet.CreatedByAgentPodLabel] = pod
	}
	if opts.ClientRandom == "" {
		opts.ClientRandom = NewClientRandom()
	}
	random := requestRandom(opts.ClientRandom)
	reg := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: registrationName(clientID, random), Namespace: b.ClusterNamespace,
			Labels: map[string]string{fleet.RegistrationTokenLabel: b.TokenName}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: random, ClusterLabels: labels},
	}
	api, err := newCredentialAPI(importCfg)
	if err != nil {
		return nil, fmt.Errorf("building the manager client: %w", err)
	}
	// Ask for the hand-over through the content API only when the manager
	// serves it; otherwise (or with Rancher Fleet's manager) a Secret.
	offered, err := api.chooseHandover(ctx, opts.ClientRandom)
	if err != nil {
		return nil, fmt.Errorf("asking the manager's API server which credential hand-over it offers: %w", err)
	}
	viaAPI := offered.credential
	if viaAPI {
		reg.Annotations = map[string]string{contentapi.HandoverAnnotation: contentapi.HandoverContentAPI}
		// This manager's finalizer (it revokes the credential when the
		// registration goes), set here to spare the manager an update.
		reg.Finalizers = []string{fleet.ClusterRegistrationFinalizer}
	}
	if offered.clusterStatus {
		// Check-ins through the content API (the heartbeat's first
		// choice): the cluster needs no grant in the workspace.
		if reg.Annotations == nil {
			reg.Annotations = map[string]string{}
		}
		reg.Annotations[contentapi.ClusterStatusAnnotation] = contentapi.ClusterStatusContentAPI
	}
	if err := createRequest(ctx, up, reg, opts.ClientRandom); err != nil {
		if apierrors.IsUnauthorized(err) {
			return nil, fmt.Errorf("registration token %q refused by the manager (expired or deleted): %w", b.TokenName, ErrRefused)
		}
		return nil, fmt.Errorf("creating cluster registration in %s: %w", b.ClusterNamespace, err)
	}
	random = reg.Spec.ClientRandom
	l.Info("waiting for the registration to be granted", "registration", reg.Name, "workspace", b.ClusterNamespace)
	deadline := time.Now().Add(opts.Timeout)
	var (
		handed  *contentapi.RegistrationCredential
		release func(context.Context) error
	)
	if viaAPI {
		handed, err = api.await(ctx, b.ClusterNamespace, reg.Name, opts.PollInterval, deadline)
	} else {
		var s *corev1.Secret
		s, err = awaitHandover(ctx, handoverWait{
			Config: importCfg, Namespace: b.SystemRegistrationNamespace, Name: names.RegistrationSecretName(clientID, random),
			PollInterval: opts.PollInterval, Deadline: deadline,
		})
		if err == nil {
			handed = handedOverIn(s)
			if handed.Token == "" || handed.DeploymentNamespace == "" {
				return nil, errors.New("registration secret is incomplete")
			}
			// The agent deletes the Secret once it stored the credential.
			release = func(ctx context.Context) error { return client.IgnoreNotFound(up.Delete(ctx, s)) }
		}
	}
	if err != nil {
		return nil, registrationError(err, reg.Name, b.TokenName, opts.Timeout)
	}
	cred := newCredential(b.APIServerURL, ca, handed.Token)
	cred.DeploymentNamespace, cred.ClusterNamespace, cred.ClusterName = handed.DeploymentNamespace, handed.ClusterNamespace, handed.ClusterName
	cred.handover = release
	return cred, waitUsable(ctx, cred, opts.PollInterval)
}

// handedOverIn reads the credential from a hand-over Secret.
func handedOverIn(s *corev1.Secret) *contentapi.RegistrationCredential {
	return &contentapi.RegistrationCredential{
		Token:               string(s.Data["token"]),
		DeploymentNamespace: string(s.Data["deploymentNamespace"]),
		ClusterNamespace:    string(s.Data["clusterNamespace"]),
		ClusterName:         string(s.Data["clusterName"]),
	}
}

// registrationError says why waiting for the credential of registration
// name, made with token, failed.
func registrationError(err error, name, token string, timeout time.Duration) error {
	var refusal *managerRefusal
	switch {
	case errors.As(err, &refusal):
		return fmt.Errorf("registration %s with token %q: %w", name, token, err)
	case errors.Is(err, ErrRefused):
		return fmt.Errorf("registration token %q refused while waiting (expired or deleted): %w", token, err)
	case errors.Is(err, errNotGranted):
		return fmt.Errorf("registration %s was not granted within %s (see its status conditions on the manager)", name, timeout)
	}
	return err
}

// waitUsable waits until the new credential is accepted. The manager
// writes the RBAC before the hand-over Secret, so the first check nearly
// always passes; when the API server's RBAC cache lags, it catches up
// within a second or two, hence the short first waits.
func waitUsable(ctx context.Context, cred *Credential, interval time.Duration) error {
	var err error
	wait := min(interval, 250*time.Millisecond)
	for range 15 {
		if err = Check(ctx, cred); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(Jitter(wait)):
		}
		wait = min(wait*2, interval)
	}
	return fmt.Errorf("new credential not usable: %w", err)
}

// Store writes Secret fleet-agent.
func Store(ctx context.Context, c client.Client, ns string, cred *Credential) error {
	data, err := cred.secretData()
	if err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: AgentSecretName, Namespace: ns}}
	err = c.Get(ctx, client.ObjectKeyFromObject(s), s)
	switch {
	case apierrors.IsNotFound(err):
		s.Data = data
		return c.Create(ctx, s)
	case err != nil:
		return err
	}
	s.Data = data
	return c.Update(ctx, s)
}

// Renew requests a new token for the credential's own ServiceAccount (the
// only token it may create), with the lifetime of the current one, stores
// it, and switches every client to it.
func Renew(ctx context.Context, downstream client.Client, ns string, cred *Credential) (TokenInfo, error) {
	info, err := ParseToken(cred.Token())
	if err != nil {
		return info, err
	}
	up, err := upstreamClient(cred.RESTConfig())
	if err != nil {
		return info, err
	}
	seconds := int64(info.Expires.Sub(info.IssuedAt) / time.Second)
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: info.ServiceAccount, Namespace: info.Namespace}}
	if err := up.SubResource("token").Create(ctx, sa, tr); err != nil {
		return info, fmt.Errorf("renewing credential: %w", classify(err))
	}
	old := cred.Token()
	cred.SetToken(tr.Status.Token)
	if err := Store(ctx, downstream, ns, cred); err != nil {
		cred.SetToken(old)
		return info, fmt.Errorf("storing renewed credential: %w", err)
	}
	return ParseToken(tr.Status.Token)
}

// upstreamClient is a client of the manager's API server for the few
// kinds registration uses. Its fixed REST mapping spares the discovery
// requests a client otherwise makes before its first request: with a
// thousand agents registering at once, those would be thousands of reads
// of the API server's largest documents.
func upstreamClient(cfg *rest.Config) (client.WithWatch, error) {
	m := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{
		fleet.GroupVersion.WithKind("ClusterRegistration"),
		fleet.GroupVersion.WithKind("BundleDeployment"),
		corev1.SchemeGroupVersion.WithKind("Secret"),
		corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
	} {
		m.Add(gvk, meta.RESTScopeNamespace)
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme.Scheme, Mapper: m})
}

// Jitter spreads d by up to +20%.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

func sortStrings(s []string) []string {
	slices.Sort(s)
	return s
}

// TrustedCA is the CA bundle the agent verifies the manager with. In mode
// "strict" it is apiServerCA. In "system-store" (the chart's default; also
// when unset) the operating system's store is used when the URL verifies
// with it (nil result), else apiServerCA, as Fleet does.
func TrustedCA(ctx context.Context, url string, ca []byte, mode string) []byte {
	if mode == "strict" || len(ca) == 0 {
		return ca
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/version", nil)
	if err != nil {
		return ca
	}
	resp, err := http.DefaultClient.Do(req) // system roots only
	if err != nil {
		return ca
	}
	_ = resp.Body.Close()
	return nil
}
