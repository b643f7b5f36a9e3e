package registration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/names"
)

// Credentials hands granted credentials to registering agents through the
// content API (contentapi.Credentials), for registrations that ask for it
// (contentapi.HandoverAnnotation): no hand-over Secret, no read grant for
// it, nothing to delete afterwards. A caller gets the credential of a
// registration only if it is the ServiceAccount of the registration token
// the registration names, and only within RegistrationSecretTTL of the
// grant (the life of a hand-over Secret). Each fetch mints a new token of
// the cluster's ServiceAccount; deleting the registration or the Cluster
// revokes them all (the ServiceAccount goes).
//
// It reads the manager's cache only, so any replica whose cache holds
// ClusterRegistrations and tokens can answer, leader or not.
type Credentials struct {
	// kube reads registrations and tokens from the manager's cache and
	// requests tokens from the API server.
	kube client.Client
	opts Options

	mu      sync.Mutex
	waiters map[types.NamespacedName]*waiter
}

// waiter is the open watches of one registration: ch closes at the
// registration's next change.
type waiter struct {
	ch chan struct{}
	n  int
}

// NewCredentials returns Credentials to pass as Options.Credentials and to
// the content API; Setup connects it to the manager.
func NewCredentials() *Credentials {
	return &Credentials{waiters: map[types.NamespacedName]*waiter{}}
}

// enabledFor reports whether reg's credential is handed over by c.
func (c *Credentials) enabledFor(reg *fleet.ClusterRegistration) bool {
	return c != nil && reg.Annotations[contentapi.HandoverAnnotation] == contentapi.HandoverContentAPI
}

// Setup connects c to mgr, on every manager replica that serves the
// content API (not only the one with the registration controllers): it
// reads through mgr's cache and wakes watches on every change of a
// ClusterRegistration that the cache sees.
func (c *Credentials) Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opts.Defaults()
	inf, err := mgr.GetCache().GetInformer(ctx, &fleet.ClusterRegistration{})
	if err != nil {
		return err
	}
	wake := func(o any) {
		if reg, ok := o.(*fleet.ClusterRegistration); ok {
			c.wake(client.ObjectKeyFromObject(reg))
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, o any) { wake(o) },
	}); err != nil {
		return err
	}
	c.mu.Lock()
	c.kube, c.opts = mgr.GetClient(), opts
	c.mu.Unlock()
	return nil
}

func (c *Credentials) wait(key types.NamespacedName) (<-chan struct{}, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waiters[key]
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		c.waiters[key] = w
	}
	w.n++
	return w.ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		w.n--
		if w.n == 0 && c.waiters[key] == w {
			delete(c.waiters, key)
		}
	}
}

func (c *Credentials) wake(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.waiters[key]; w != nil {
		close(w.ch)
		delete(c.waiters, key)
	}
}

// Credential implements contentapi.Credentials.
func (c *Credentials) Credential(ctx context.Context, req contentapi.CredentialRequest) (*contentapi.RegistrationCredential, error) {
	c.mu.Lock()
	kube := c.kube
	c.mu.Unlock()
	if kube == nil {
		return nil, apierrors.NewServiceUnavailable("the registration controller is starting")
	}
	key := types.NamespacedName{Namespace: req.Namespace, Name: req.Name}
	for {
		var (
			changed <-chan struct{}
			release = func() {}
		)
		if req.Wait {
			// Before the read: a change between the read and the wait
			// still wakes it.
			changed, release = c.wait(key)
		}
		reg := &fleet.ClusterRegistration{}
		err := kube.Get(ctx, key, reg)
		switch {
		case apierrors.IsNotFound(err):
			// The agent may be ahead of the cache.
		case err != nil:
			release()
			return nil, apierrors.NewInternalError(fmt.Errorf("reading registration: %w", err))
		default:
			if cred, err := c.answer(ctx, req.User, reg); cred != nil || err != nil {
				release()
				return cred, err
			}
		}
		if !req.Wait {
			return nil, apierrors.NewNotFound(contentapi.CredentialGroupResource, req.Name)
		}
		select {
		case <-ctx.Done():
			release()
			return nil, nil
		case <-changed:
			release()
		}
	}
}

// answer returns reg's credential for user, an error when user may not
// have it, or nil, nil while reg is not granted yet.
func (c *Credentials) answer(ctx context.Context, user string, reg *fleet.ClusterRegistration) (*contentapi.RegistrationCredential, error) {
	var tok *fleet.ClusterRegistrationToken
	if name := reg.Labels[fleet.RegistrationTokenLabel]; name != "" {
		tok = &fleet.ClusterRegistrationToken{}
		if err := c.kube.Get(ctx, client.ObjectKey{Namespace: reg.Namespace, Name: name}, tok); err != nil {
			tok = nil
		}
	}
	ready, err := handoverVerdict(reg, tok, user, c.opts.RegistrationSecretTTL, time.Now())
	if !ready || err != nil {
		return nil, err
	}
	saName, clusterNS := RequestSAName(reg), names.ClusterNamespace(reg.Namespace, reg.Status.ClusterName)
	seconds := int64(c.opts.AgentTokenTTL / time.Second)
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: saName, Namespace: clusterNS}}
	if err := c.kube.SubResource("token").Create(ctx, sa, tr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, credentialForbidden(reg, "the credential was revoked")
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("requesting agent token: %w", err))
	}
	return &contentapi.RegistrationCredential{
		TypeMeta:            metav1.TypeMeta{Kind: contentapi.CredentialKind, APIVersion: contentapi.Group + "/" + contentapi.Version},
		ObjectMeta:          metav1.ObjectMeta{Name: reg.Name, Namespace: reg.Namespace},
		Token:               tr.Status.Token,
		DeploymentNamespace: clusterNS,
		ClusterNamespace:    reg.Namespace,
		ClusterName:         reg.Status.ClusterName,
		SystemNamespace:     c.opts.SystemNamespace,
	}, nil
}

// handoverVerdict decides, from the cache alone, whether user gets the
// credential of reg now (true), later (false, nil: not granted yet) or
// never (a Forbidden error). tok is the registration token reg names (nil
// when it does not exist). Only that token's ServiceAccount may have it,
// only when reg asked for the content API hand-over, and only within ttl
// of the grant.
func handoverVerdict(reg *fleet.ClusterRegistration, tok *fleet.ClusterRegistrationToken, user string, ttl time.Duration, now time.Time) (bool, error) {
	if tok == nil || user != serviceAccountUser(tok.Namespace, TokenSAName(tok)) {
		return false, credentialForbidden(reg, "only the registration token this registration was made with may fetch its credential")
	}
	if reg.Annotations[contentapi.HandoverAnnotation] != contentapi.HandoverContentAPI {
		return false, credentialForbidden(reg, "this registration's credential is handed over in a Secret (it did not ask for "+contentapi.HandoverAnnotation+")")
	}
	cond := meta.FindStatusCondition(reg.Status.Conditions, ConditionGranted)
	if !reg.Status.Granted {
		if cond != nil && refused(cond.Reason) {
			return false, credentialForbidden(reg, "registration refused: "+cond.Message)
		}
		return false, nil
	}
	grantedAt := reg.CreationTimestamp.Time
	if cond != nil {
		grantedAt = cond.LastTransitionTime.Time
	}
	if now.Sub(grantedAt) > ttl {
		return false, credentialForbidden(reg, fmt.Sprintf("the credential was granted more than %s ago and is no longer handed over; register again", ttl))
	}
	return true, nil
}

func credentialForbidden(reg *fleet.ClusterRegistration, msg string) error {
	return apierrors.NewForbidden(contentapi.CredentialGroupResource, reg.Name, errors.New(msg))
}

// refused reports whether a Granted condition's reason is a refusal (bad
// input, not retried) rather than a wait or a transient error. It names
// every reason grant refuses with: one left out keeps a content API agent
// waiting for a credential that never comes, without telling it why.
func refused(reason string) bool {
	switch reason {
	case ReasonInvalid, ReasonUnknownToken, ReasonTokenExpired, ReasonTTLRequired,
		ReasonInvalidName, ReasonOtherWorkspace, ReasonNameConflict:
		return true
	}
	return false
}

// serviceAccountUser is the user name the API server gives a
// ServiceAccount's tokens.
func serviceAccountUser(ns, name string) string { return "system:serviceaccount:" + ns + ":" + name }

// MayHandOverCredentials reports whether c's user (the manager) may grant
// registration tokens `get` and `watch` on registrationcredentials and
// agents `update` on clusterstatuses, which the API server requires of
// whoever writes such rules into a Role. A manager whose ClusterRole
// predates the content API's agent features (a chart not upgraded with
// them) must not offer them: its Roles would lack the rules, and agents
// would wait on watches the API server refuses.
func MayHandOverCredentials(ctx context.Context, c client.Client) (bool, error) {
	for _, want := range []struct{ verb, resource string }{
		{"get", contentapi.CredentialResource}, {"watch", contentapi.CredentialResource},
		{"update", contentapi.ClusterStatusResource},
	} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: want.verb, Group: contentapi.Group, Resource: want.resource},
		}}
		if err := c.Create(ctx, review); err != nil {
			return false, err
		}
		if !review.Status.Allowed {
			return false, nil
		}
	}
	return true, nil
}

// registrationUIDAnnotation on a hand-over Secret names the registration
// (by UID) whose credential it holds: a registration deleted and made
// again under the same name is another one, with another ServiceAccount.
const registrationUIDAnnotation = fleet.LabelPrefix + "registration-uid"

// handedOver is what one grant wrote for the Secret hand-over.
type handedOver struct {
	secret    types.UID
	clusterNS string
}

// handOver puts reg's credential for g into its hand-over Secret, which
// only the registration token can read, at most once per registration.
// The grant writes the Secret before it marks the registration granted;
// when that status write fails (a conflict, a refused write), the grant
// runs again, and must not leave a second credential behind:
//   - the Secret this process wrote is still there and still valid for
//     reg (reusable): it is handed over as it is, no token is minted;
//   - it is gone: the agent took the credential (it deletes the Secret
//     once it stored it), and a new Secret would only wait, unread, with
//     a live token, for RegistrationSecretTTL: nothing is written;
//   - otherwise a new token replaces the Secret's content (one Secret
//     name per registration, so there is never a second Secret).
//
// What this process wrote is kept in memory (handedOver): after a restart
// between the Secret and the status write, a Secret the agent already took
// is written once more, and removed after RegistrationSecretTTL.
func (r *RegistrationReconciler) handOver(ctx context.Context, reg *fleet.ClusterRegistration, g grant, secretName string, labels map[string]string) error {
	key := client.ObjectKey{Namespace: r.Opts.SystemRegistrationNamespace, Name: secretName}
	var existing *corev1.Secret
	if v, ok := r.handedOver.Load(reg.UID); ok {
		s := &corev1.Secret{}
		err := r.Reader.Get(ctx, key, s)
		switch {
		case apierrors.IsNotFound(err) && v.(handedOver).clusterNS == g.ClusterNamespace:
			return nil
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		default:
			existing = s
		}
	}
	if existing != nil {
		if done, err := r.reuseHandover(ctx, existing, reg, g, labels); done || err != nil {
			return err
		}
	}
	seconds := int64(r.Opts.AgentTokenTTL / time.Second)
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	if err := r.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: g.SA, Namespace: g.ClusterNamespace}}, tr); err != nil {
		return fmt.Errorf("requesting agent token: %w", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: key.Namespace, Labels: labels,
			Annotations: map[string]string{registrationUIDAnnotation: string(reg.UID)}},
		Type: fleet.SecretTypeAgentCredential,
		Data: map[string][]byte{
			"token":               []byte(tr.Status.Token),
			"deploymentNamespace": []byte(g.ClusterNamespace),
			"clusterNamespace":    []byte(g.Workspace),
			"clusterName":         []byte(g.Cluster),
			"systemNamespace":     []byte(r.Opts.SystemNamespace),
		},
	}
	if existing == nil {
		// A create is the common case, and cheaper than an apply.
		err := r.Client.Create(ctx, secret, fieldOwner)
		switch {
		case err == nil:
			r.handedOver.Store(reg.UID, handedOver{secret: secret.UID, clusterNS: g.ClusterNamespace})
			return nil
		case !apierrors.IsAlreadyExists(err):
			return fmt.Errorf("creating hand-over Secret %s: %w", key, err)
		}
		// Written before this process knew of it (a restart): the token
		// just minted is dropped unless the Secret is not reg's.
		existing = &corev1.Secret{}
		if err := r.Reader.Get(ctx, key, existing); err != nil {
			return err
		}
		if done, err := r.reuseHandover(ctx, existing, reg, g, labels); done || err != nil {
			return err
		}
	}
	// Not reg's credential (any more): replaced, so that the one Secret
	// holds the new one.
	if err := apply(ctx, r.Client, secret); err != nil {
		return err
	}
	r.handedOver.Store(reg.UID, handedOver{secret: secret.UID, clusterNS: g.ClusterNamespace})
	return nil
}

// reuseHandover records s as reg's hand-over and reports true when s
// already holds reg's credential for g (see reusableHandover).
func (r *RegistrationReconciler) reuseHandover(ctx context.Context, s *corev1.Secret, reg *fleet.ClusterRegistration, g grant, labels map[string]string) (bool, error) {
	ok, err := r.reusableHandover(ctx, s, reg, g, labels)
	if ok {
		r.handedOver.Store(reg.UID, handedOver{secret: s.UID, clusterNS: g.ClusterNamespace})
	}
	return ok, err
}

// reusableHandover reports whether s, an existing hand-over Secret, holds
// reg's credential for g as a new write would: written for this very
// registration, naming g's cluster and labelled as the grant labels it
// (the clean-ups find it by these), with a token of g's ServiceAccount as
// it exists now (one deleted and made again refuses the old one's tokens)
// that has most of its life ahead.
func (r *RegistrationReconciler) reusableHandover(ctx context.Context, s *corev1.Secret, reg *fleet.ClusterRegistration, g grant, labels map[string]string) (bool, error) {
	if !s.DeletionTimestamp.IsZero() || s.Type != fleet.SecretTypeAgentCredential || s.Annotations[registrationUIDAnnotation] != string(reg.UID) ||
		string(s.Data["deploymentNamespace"]) != g.ClusterNamespace || string(s.Data["clusterNamespace"]) != g.Workspace ||
		string(s.Data["clusterName"]) != g.Cluster || string(s.Data["systemNamespace"]) != r.Opts.SystemNamespace {
		return false, nil
	}
	for k, v := range labels {
		if s.Labels[k] != v {
			return false, nil
		}
	}
	c, err := parseSAToken(string(s.Data["token"]))
	if err != nil || c.namespace != g.ClusterNamespace || c.name != g.SA || !time.Now().Before(c.halfLife) {
		return false, nil
	}
	sa := &corev1.ServiceAccount{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: g.ClusterNamespace, Name: g.SA}, sa); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return sa.UID == c.uid, nil
}

// saToken is what a ServiceAccount token (a JWT from the TokenRequest API)
// says about itself.
type saToken struct {
	namespace, name string
	uid             types.UID
	// halfLife is halfway between its issue and its expiry.
	halfLife time.Time
}

// parseSAToken reads the claims of a ServiceAccount token without
// verifying it: it is one the manager wrote itself, and only checked for
// whether it is still worth handing over.
func parseSAToken(token string) (saToken, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return saToken{}, errors.New("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return saToken{}, err
	}
	var cl struct {
		Exp int64 `json:"exp"`
		Iat int64 `json:"iat"`
		K8s struct {
			Namespace      string `json:"namespace"`
			ServiceAccount struct {
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"serviceaccount"`
		} `json:"kubernetes.io"`
	}
	if err := json.Unmarshal(payload, &cl); err != nil {
		return saToken{}, err
	}
	if cl.Exp == 0 || cl.Exp < cl.Iat || cl.K8s.ServiceAccount.UID == "" {
		return saToken{}, errors.New("not a bound ServiceAccount token")
	}
	return saToken{namespace: cl.K8s.Namespace, name: cl.K8s.ServiceAccount.Name, uid: types.UID(cl.K8s.ServiceAccount.UID),
		halfLife: time.Unix(cl.Iat+(cl.Exp-cl.Iat)/2, 0)}, nil
}
