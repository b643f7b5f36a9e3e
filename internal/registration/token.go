package registration

import (
	"context"
	"fmt"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/finalizer"
	"github.com/fleetgo/fleet/internal/names"
)

const (
	tokenFinalizer = "fleet.cattle.io/registration-token"
	// tokenExpiryAnnotation on the values Secret records when the import
	// token inside it ends, so it is refreshed in time (never logged).
	tokenExpiryAnnotation = "fleet.cattle.io/token-expiration"
	// tokenIssuedAnnotation records when that import token was requested:
	// with the expiry it gives the lifetime the API server granted, which
	// may be shorter than the one asked for
	// (--service-account-max-token-expiration).
	tokenIssuedAnnotation = "fleet.cattle.io/token-issued"
	labelTokenNamespace   = "fleet.cattle.io/import-token-namespace"
	// minTokenLifetime is the shortest lifetime kube-apiserver accepts.
	minTokenLifetime = 10 * time.Minute
	// APIServerURLDefaultedAnnotation on a token's values Secret is "true"
	// when its apiServerURL is not configured but the manager's own view
	// of its API server (Options.APIServerURLDefaulted).
	APIServerURLDefaultedAnnotation = "fleet.cattle.io/api-server-url-defaulted"
	// ReasonTTLRequired is the reason of the Event about a token deleted
	// for having no TTL (Options.RegistrationTokenTTLRequired), and of
	// the refusal of a registration made with one.
	ReasonTTLRequired = "TokenTTLRequired"
)

// TokenReconciler turns a ClusterRegistrationToken into an import
// ServiceAccount that can only create ClusterRegistrations in its namespace,
// and a Secret with a ready values.yaml for the fleet-agent chart.
type TokenReconciler struct {
	reconcilerBase
}

// SetupWithManager registers the controller.
func (r *TokenReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("registration-token").
		For(&fleet.ClusterRegistrationToken{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, deleting))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Opts.Workers, RateLimiter: rateLimiter()}).
		Complete(r)
}

// TokenSAName is the import ServiceAccount of a token.
func TokenSAName(tok *fleet.ClusterRegistrationToken) string {
	return names.SafeConcatName(tok.Name, string(tok.UID))
}

// tokenExpiry is when tok stops working, or nil when it never does.
func tokenExpiry(tok *fleet.ClusterRegistrationToken) *metav1.Time {
	if tok.Spec.TTL == nil || tok.Spec.TTL.Duration <= 0 {
		return nil
	}
	t := metav1.NewTime(tok.CreationTimestamp.Add(tok.Spec.TTL.Duration))
	return &t
}

// Reconcile implements reconcile.Reconciler.
func (r *TokenReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	tok := &fleet.ClusterRegistrationToken{}
	if err := r.Client.Get(ctx, req.NamespacedName, tok); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	deleting, err := finalizer.Handle(ctx, r.Client, tok, tokenFinalizer, func(ctx context.Context) error {
		return r.cleanupToken(ctx, tok)
	})
	if deleting || err != nil {
		return ctrl.Result{}, err
	}
	now := time.Now()
	expires := tokenExpiry(tok)
	if expires == nil && r.Opts.RegistrationTokenTTLRequired {
		// Before anything is created for it: it never hands out a credential.
		log.Info("registration token has no TTL, and a TTL is required; deleting it", "token", tok.Name)
		if r.Recorder != nil {
			r.Recorder.Eventf(tok, nil, corev1.EventTypeWarning, ReasonTTLRequired, "Delete",
				"registration token %s has no TTL (spec.ttl), and the manager requires one: deleted", tok.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, tok))
	}
	if expires != nil && !now.Before(expires.Time) {
		log.Info("registration token expired; deleting it and its import credential", "expired", expires.Time)
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, tok))
	}

	sa := TokenSAName(tok)
	owner := metav1.OwnerReference{APIVersion: fleet.GroupVersion.String(), Kind: "ClusterRegistrationToken", Name: tok.Name, UID: tok.UID}
	for _, o := range tokenObjects(tok.Name, tok.Namespace, sa, owner) {
		if err := apply(ctx, r.Client, o); err != nil {
			return ctrl.Result{}, err
		}
	}
	refreshAt, err := r.ensureValuesSecret(ctx, tok, sa, expires)
	if err != nil {
		return ctrl.Result{}, err
	}

	old := tok.DeepCopy()
	tok.Status.SecretName = tok.Name
	tok.Status.Expires = expires
	if err := r.Client.Status().Patch(ctx, tok, client.MergeFrom(old)); err != nil {
		return ctrl.Result{}, err
	}
	next := time.Until(refreshAt)
	if expires != nil && time.Until(expires.Time) < next {
		next = time.Until(expires.Time)
	}
	return ctrl.Result{RequeueAfter: jitter(max(next, time.Second))}, nil
}

// ensureValuesSecret writes the Secret named like the token, unless it holds
// a token that is good for a while; it returns when to refresh it, which is
// always in the future.
func (r *TokenReconciler) ensureValuesSecret(ctx context.Context, tok *fleet.ClusterRegistrationToken, sa string, expires *metav1.Time) (time.Time, error) {
	lifetime := r.Opts.InfiniteTokenLifetime
	if expires != nil {
		lifetime = max(time.Until(expires.Time), minTokenLifetime)
	}
	existing := &corev1.Secret{}
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: tok.Namespace, Name: tok.Name}, existing)
	switch {
	case err == nil:
		if t, perr := time.Parse(time.RFC3339, existing.Annotations[tokenExpiryAnnotation]); perr == nil &&
			existing.Type == fleet.SecretTypeClusterRegistrationValues && r.valuesCurrent(existing.Data["values"]) {
			// Keep the values that were handed out as long as they work.
			issued, _ := time.Parse(time.RFC3339, existing.Annotations[tokenIssuedAnnotation])
			if refresh, keep := valuesRefresh(time.Now(), issued, t, expires, lifetime); keep {
				return refresh, nil
			}
		}
	case !apierrors.IsNotFound(err):
		return time.Time{}, err
	}

	// Ask for whole seconds, rounded up, so that a token asked to live as
	// long as the registration token does not end just before it.
	seconds := int64((lifetime + time.Second - 1) / time.Second)
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	issued := time.Now().Truncate(time.Second)
	if err := r.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: tok.Namespace}}, tr); err != nil {
		return time.Time{}, fmt.Errorf("requesting import token: %w", err)
	}
	expiry := tr.Status.ExpirationTimestamp.Time
	values, err := r.valuesYAML(tok, tr.Status.Token)
	if err != nil {
		return time.Time{}, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: tok.Name, Namespace: tok.Namespace,
			Labels: map[string]string{fleet.ManagedLabel: "true", labelTokenOf: tok.Name},
			Annotations: map[string]string{
				tokenExpiryAnnotation: expiry.UTC().Format(time.RFC3339),
				tokenIssuedAnnotation: issued.UTC().Format(time.RFC3339),
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: fleet.GroupVersion.String(), Kind: "ClusterRegistrationToken", Name: tok.Name, UID: tok.UID}}},
		Type: fleet.SecretTypeClusterRegistrationValues,
		Data: map[string][]byte{"values": values},
	}
	if r.Opts.APIServerURLDefaulted {
		secret.Annotations[APIServerURLDefaultedAnnotation] = "true"
	}
	if err := apply(ctx, r.Client, secret); err != nil {
		return time.Time{}, err
	}
	return mintedRefresh(time.Now(), issued, expiry, expires, lifetime), nil
}

// valuesRefresh decides about the import token in a values Secret, issued
// at issued (zero when the Secret does not say) and ending at expiry, of a
// registration token ending at expires (nil: never); asked is the lifetime
// the manager asks for now. It returns when to replace the import token,
// and whether to keep it until then (false: replace it now).
//
// The import token is replaced halfway through the lifetime the API server
// granted (which may be shorter than the one asked for), and never when it
// outlives the registration token: then there is nothing to refresh before
// the registration token ends, and the refresh time is that end.
func valuesRefresh(now, issued, expiry time.Time, expires *metav1.Time, asked time.Duration) (refresh time.Time, keep bool) {
	if !now.Before(expiry) {
		return time.Time{}, false
	}
	if expires != nil && !expiry.Before(expires.Time) {
		return expires.Time, true
	}
	if issued.IsZero() || !issued.Before(expiry) {
		// A Secret written before the issue time was recorded: assume the
		// lifetime asked for was granted, as the manager did then. If it
		// was capped, the token is replaced once, by one that records it.
		issued = expiry.Add(-asked)
	}
	refresh = issued.Add(expiry.Sub(issued) / 2)
	return refresh, now.Before(refresh)
}

// mintedRefresh is when to refresh an import token minted just now (see
// valuesRefresh). It is never earlier than half the shortest lifetime the
// API server grants from now, so that a clock skew between the manager and
// the API server cannot make it mint a token again right away.
func mintedRefresh(now, issued, expiry time.Time, expires *metav1.Time, asked time.Duration) time.Time {
	refresh, _ := valuesRefresh(now, issued, expiry, expires, asked)
	if floor := now.Add(minTokenLifetime / 2); refresh.Before(floor) {
		return floor
	}
	return refresh
}

// ValuesCheckinInterval is the key under the values' `internal` that
// carries the manager's agentCheckinInterval: the fleet-agent chart runs
// the agent with it unless its own `checkinInterval` is set, so that agents
// installed from a token check in as often as the manager expects. A
// separate key rather than `checkinInterval` itself, so that a
// checkinInterval the user sets wins whatever the order of the values files.
const ValuesCheckinInterval = "checkinInterval"

// Values are the keys of the fleet-agent chart values a token hands out.
type Values struct {
	APIServerURL                string            `json:"apiServerURL"`
	APIServerCA                 string            `json:"apiServerCA"`
	ClusterNamespace            string            `json:"clusterNamespace"`
	SystemRegistrationNamespace string            `json:"systemRegistrationNamespace"`
	Token                       string            `json:"token"`
	TokenName                   string            `json:"tokenName"`
	Internal                    map[string]string `json:"internal,omitempty"`
}

func (r *TokenReconciler) valuesYAML(tok *fleet.ClusterRegistrationToken, token string) ([]byte, error) {
	v := Values{
		APIServerURL:                r.Opts.APIServerURL,
		APIServerCA:                 string(r.Opts.APIServerCA),
		ClusterNamespace:            tok.Namespace,
		SystemRegistrationNamespace: r.Opts.SystemRegistrationNamespace,
		Token:                       token,
		TokenName:                   tok.Name,
	}
	v.Internal = map[string]string{}
	if r.Opts.SystemNamespace != fleet.DefaultSystemNamespace {
		v.Internal["systemNamespace"] = r.Opts.SystemNamespace
	}
	if iv := r.checkinInterval(); iv != "" {
		v.Internal[ValuesCheckinInterval] = iv
	}
	if len(v.Internal) == 0 {
		v.Internal = nil
	}
	return yaml.Marshal(v)
}

// checkinInterval is the manager's agentCheckinInterval as the values
// carry it ("" when there is none).
func (r *TokenReconciler) checkinInterval() string {
	if r.Opts.AgentCheckinInterval <= 0 {
		return ""
	}
	return r.Opts.AgentCheckinInterval.String()
}

// valuesCurrent reports whether the values handed out (a values Secret's
// "values") carry the manager's current check-in interval, apiServerURL
// and apiServerCA: a manager restarted with other ones writes the values
// again, so that clusters installed from an older token's values
// afterwards follow it (and reach it where it now is).
func (r *TokenReconciler) valuesCurrent(raw []byte) bool {
	var v Values
	if len(raw) == 0 || yaml.Unmarshal(raw, &v) != nil {
		return false
	}
	return v.Internal[ValuesCheckinInterval] == r.checkinInterval() &&
		v.APIServerURL == r.Opts.APIServerURL && v.APIServerCA == string(r.Opts.APIServerCA)
}

// cleanupToken revokes the import credential of a deleted token: its
// ServiceAccount (which invalidates every token of it), RBAC, values Secret
// and the read grants on registration secrets.
func (r *TokenReconciler) cleanupToken(ctx context.Context, tok *fleet.ClusterRegistrationToken) error {
	sa := TokenSAName(tok)
	for _, o := range tokenObjects(tok.Name, tok.Namespace, sa, metav1.OwnerReference{}) {
		if err := deleteIfExists(ctx, r.Client, o); err != nil {
			return err
		}
	}
	if err := deleteIfExists(ctx, r.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tok.Name, Namespace: tok.Namespace}}); err != nil {
		return err
	}
	sel := client.MatchingLabels{labelTokenOf: tok.Name, labelTokenNamespace: tok.Namespace}
	in := client.InNamespace(r.Opts.SystemRegistrationNamespace)
	for _, o := range []client.Object{&rbacv1.RoleBinding{}, &rbacv1.Role{}} {
		if err := r.Client.DeleteAllOf(ctx, o, in, sel); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}
